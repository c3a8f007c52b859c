/* What the daemon accepts of a kernel's namespace answers (kernel/namespace_frames.h): only a
   memfd taken from the process passes (sealed and within the limit for a save, empty and
   writable for a load), and the report is rebuilt bounded; a kernel's "cellbox" frames parse. */
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "kernel/message.h"
#include "kernel/namespace_frames.h"

static int sealed_memfd(const char *data, size_t size, int seals)
{
    int fd = memfd_create("test-namespace", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    CHECK(fd >= 0);
    CHECK(write(fd, data, size) == (ssize_t)size);
    CHECK(fcntl(fd, F_ADD_SEALS, seals) == 0);
    return fd;
}

static void test_a_sealed_memfd_within_the_limit_passes(void)
{
    char why[200];
    long long size = -1;
    int fd = sealed_memfd("CBXNS01\n", 8, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK);
    CHECK(namespace_check_sealed(fd, 8, &size, why, sizeof why) == 0);
    CHECK(size == 8);
    CHECK(namespace_check_sealed(fd, 7, &size, why, sizeof why) < 0);
    CHECK(strstr(why, "over the 7-byte limit") != NULL);
    close(fd);
}

static void test_an_unsealed_memfd_or_a_file_is_refused_for_a_save(void)
{
    char why[200];
    long long size;
    int unsealed = sealed_memfd("abc", 3, F_SEAL_SHRINK); /* still writable and growable */
    CHECK(namespace_check_sealed(unsealed, 100, &size, why, sizeof why) < 0);
    CHECK(strstr(why, "not sealed") != NULL);
    close(unsealed);
    char path[] = "/tmp/cellbox-test-namespace-XXXXXX";
    int file = mkstemp(path);
    CHECK(file >= 0);
    unlink(path);
    CHECK(namespace_check_sealed(file, 100, &size, why, sizeof why) < 0);
    /* Where /tmp is a tmpfs (a bare Debian root, some CI machines) the file is shmem like a
       memfd, and the seal check refuses it first: either way it is refused, and says why. */
    CHECK(strcmp(why, "the kernel's descriptor is not a memfd") == 0 ||
          strstr(why, "not sealed") != NULL);
    close(file);
    int pipes[2];
    CHECK(pipe2(pipes, O_CLOEXEC) == 0);
    CHECK(namespace_check_sealed(pipes[0], 100, &size, why, sizeof why) < 0);
    CHECK(namespace_check_empty_buffer(pipes[1], why, sizeof why) < 0);
    close(pipes[0]);
    close(pipes[1]);
}

static void test_a_load_buffer_must_be_an_empty_writable_memfd(void)
{
    char why[200];
    int empty = memfd_create("test-buffer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    CHECK(namespace_check_empty_buffer(empty, why, sizeof why) == 0);
    CHECK(write(empty, "x", 1) == 1);
    CHECK(namespace_check_empty_buffer(empty, why, sizeof why) < 0);
    CHECK_STR(why, "the kernel's buffer memfd is not empty");
    close(empty);
    int sealed = sealed_memfd("", 0, F_SEAL_WRITE);
    CHECK(namespace_check_empty_buffer(sealed, why, sizeof why) < 0);
    CHECK_STR(why, "the kernel's buffer is not an unsealed memfd");
    close(sealed);
    int unsealable = memfd_create("test-buffer", MFD_CLOEXEC); /* carries F_SEAL_SEAL */
    CHECK(namespace_check_empty_buffer(unsealable, why, sizeof why) < 0);
    close(unsealable);
    /* an empty file of a tmpfs (the sandbox's /tmp is one): the kernel's, but no memfd */
    char path[] = "/dev/shm/cellbox-test-namespace-XXXXXX";
    int tmpfs_file = mkstemp(path);
    if (tmpfs_file >= 0) {
        unlink(path);
        CHECK(namespace_check_empty_buffer(tmpfs_file, why, sizeof why) < 0);
        CHECK_STR(why, "the kernel's buffer is not an unsealed memfd");
        long long size;
        CHECK(namespace_check_sealed(tmpfs_file, 100, &size, why, sizeof why) < 0);
        close(tmpfs_file);
    }
}

static void test_a_descriptor_is_taken_only_by_a_small_number_the_process_holds(void)
{
    char why[200];
    int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    CHECK(pidfd >= 0);
    int memfd = sealed_memfd("data", 4, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK);
    json_t *number = json_integer(memfd);
    int taken = namespace_take_fd(pidfd, number, why, sizeof why);
    CHECK(taken >= 0 && taken != memfd);
    CHECK((fcntl(taken, F_GETFD) & FD_CLOEXEC) != 0);
    long long size = 0;
    CHECK(namespace_check_sealed(taken, 100, &size, why, sizeof why) == 0 && size == 4);
    close(taken);
    json_t *bad[] = {json_string("3"), json_integer(-1), json_integer(1LL << 40), json_null()};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(namespace_take_fd(pidfd, bad[i], why, sizeof why) < 0);
        json_decref(bad[i]);
    }
    json_t *closed = json_integer(1000000);
    CHECK(namespace_take_fd(pidfd, closed, why, sizeof why) < 0);
    CHECK(strstr(why, "cannot take the kernel's descriptor 1000000") != NULL);
    json_decref(closed);
    json_decref(number);
    close(memfd);
    close(pidfd);
}

static void test_a_process_that_is_no_sandbox_init_is_its_own_kernel(void)
{
    CHECK(namespace_kernel_process(getpid()) == getpid());
    CHECK(namespace_kernel_process(0) == 0);
    char why[200];
    int pidfd = namespace_open_kernel_process(getpid(), why, sizeof why);
    CHECK(pidfd >= 0);
    close(pidfd);
}

/* In a new pid namespace: pid 1 forks pid 2 (the kernel's place) and pid 3, then reports on
   `report` which of its children a SIGKILL ended. */
static void sandbox_shape(int ready, int report)
{
    pid_t kernel = fork();
    if (kernel == 0) {
        pause();
        _exit(0);
    }
    pid_t other = fork();
    if (other == 0) {
        pause();
        _exit(0);
    }
    char byte = 'r';
    if (write(ready, &byte, 1) != 1)
        _exit(1);
    int status;
    pid_t ended = waitpid(-1, &status, 0);
    int answer = ended == kernel && WIFSIGNALED(status) ? 2 : ended == other ? 3 : 0;
    if (write(report, &answer, sizeof answer) != sizeof answer)
        _exit(1);
    kill(other, SIGKILL);
    kill(kernel, SIGKILL);
    _exit(0);
}

static void test_the_kernel_is_pid_2_of_its_sandbox(void)
{
    int ready[2], report[2], supervisor_pid[2];
    CHECK(pipe(ready) == 0 && pipe(report) == 0 && pipe(supervisor_pid) == 0);
    pid_t helper = fork();
    if (helper == 0) {
        if (unshare(CLONE_NEWPID) < 0)
            _exit(1);
        pid_t supervisor = fork();
        if (supervisor == 0)
            sandbox_shape(ready[1], report[1]);
        if (write(supervisor_pid[1], &supervisor, sizeof supervisor) != sizeof supervisor)
            _exit(1);
        waitpid(supervisor, NULL, 0);
        _exit(0);
    }
    close(ready[1]); /* the reads below end (0 bytes) if the helper fails rather than block */
    close(report[1]);
    close(supervisor_pid[1]);
    pid_t supervisor = 0;
    char byte = 0;
    CHECK(read(supervisor_pid[0], &supervisor, sizeof supervisor) == sizeof supervisor);
    CHECK(read(ready[0], &byte, 1) == 1);
    pid_t kernel = supervisor > 0 ? namespace_kernel_process(supervisor) : 0;
    CHECK(kernel > 0 && kernel != supervisor);
    int answer = 0;
    if (kernel > 0 && kernel != supervisor) {
        kill(kernel, SIGKILL); /* by the pid the function found: the supervisor says whose */
        CHECK(read(report[0], &answer, sizeof answer) == sizeof answer);
    } else if (supervisor > 0) {
        kill(supervisor, SIGKILL);
    }
    CHECK(answer == 2);
    waitpid(helper, NULL, 0);
    int fds[] = {ready[0], report[0], supervisor_pid[0]};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
        close(fds[i]);
}

static void test_the_report_is_rebuilt_bounded(void)
{
    char why[200], long_name[1000];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    json_t *carried = json_array();
    for (int i = 0; i < 1500; i++)
        json_array_append_new(carried, json_string(i == 0 ? long_name : "df"));
    json_t *report =
        json_pack("{s:o, s:[{s:s, s:s}], s:i, s:s}", "carried", carried, "not_carried", "name",
                  "gen", "why", "cannot pickle 'generator'", "bytes", 42, "extra", "dropped");
    json_t *rebuilt = namespace_report_from_kernel(report, why, sizeof why);
    CHECK(rebuilt != NULL);
    CHECK(json_array_size(json_object_get(rebuilt, "carried")) == 1000);
    CHECK(json_integer_value(json_object_get(rebuilt, "unlisted")) == 500);
    CHECK(strlen(json_string_value(json_array_get(json_object_get(rebuilt, "carried"), 0))) == 200);
    CHECK_STR(json_string_value(json_object_get(
                  json_array_get(json_object_get(rebuilt, "not_carried"), 0), "why")),
              "cannot pickle 'generator'");
    CHECK(json_object_get(rebuilt, "extra") == NULL);
    json_decref(rebuilt);
    json_object_set_new(report, "carried", json_pack("[i]", 7));
    CHECK(namespace_report_from_kernel(report, why, sizeof why) == NULL);
    CHECK(strstr(why, "not a string") != NULL);
    json_object_set_new(report, "carried", json_array());
    json_object_set_new(report, "bytes", json_integer(-1));
    CHECK(namespace_report_from_kernel(report, why, sizeof why) == NULL);
    json_decref(report);
    CHECK(namespace_report_from_kernel(NULL, why, sizeof why) == NULL);
}

static void test_a_kernels_cellbox_frame_needs_only_a_type(void)
{
    char why[200];
    const char *answer = "{\"channel\": \"cellbox\", \"type\": \"namespace_saved\", \"fd\": 5}";
    json_t *message = message_from_kernel(answer, strlen(answer), why, sizeof why);
    CHECK(message != NULL);
    json_decref(message);
    const char *untyped = "{\"channel\": \"cellbox\", \"fd\": 5}";
    CHECK(message_from_kernel(untyped, strlen(untyped), why, sizeof why) == NULL);
    CHECK(strstr(why, "'type'") != NULL);
    const char *numbered = "{\"channel\": \"cellbox\", \"type\": 3}";
    CHECK(message_from_kernel(numbered, strlen(numbered), why, sizeof why) == NULL);
}

int main(void)
{
    RUN(test_a_sealed_memfd_within_the_limit_passes);
    RUN(test_an_unsealed_memfd_or_a_file_is_refused_for_a_save);
    RUN(test_a_load_buffer_must_be_an_empty_writable_memfd);
    RUN(test_a_descriptor_is_taken_only_by_a_small_number_the_process_holds);
    RUN(test_a_process_that_is_no_sandbox_init_is_its_own_kernel);
    RUN(test_the_kernel_is_pid_2_of_its_sandbox);
    RUN(test_the_report_is_rebuilt_bounded);
    RUN(test_a_kernels_cellbox_frame_needs_only_a_type);
    return check_summary("namespace_frames");
}
