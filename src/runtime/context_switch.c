/* context_switch — see context_switch.h. Two leaf routines in assembly: the offsets below are
 * saved_context's fields, in order (checked by the static asserts). */
#include "runtime/context_switch.h"

#include <stddef.h>

#if CONTEXT_SWITCH_SUPPORTED
_Static_assert(offsetof(saved_context, rsp) == 48, "context_switch.c's offsets");
_Static_assert(offsetof(saved_context, rip) == 56, "context_switch.c's offsets");
_Static_assert(offsetof(saved_context, mxcsr) == 64, "context_switch.c's offsets");
_Static_assert(offsetof(saved_context, x87_control) == 68, "context_switch.c's offsets");

__asm__(".text\n"
        ".globl context_save\n"
        ".type context_save,@function\n"
        "context_save:\n"
        "    movq %rbx, 0(%rdi)\n"
        "    movq %rbp, 8(%rdi)\n"
        "    movq %r12, 16(%rdi)\n"
        "    movq %r13, 24(%rdi)\n"
        "    movq %r14, 32(%rdi)\n"
        "    movq %r15, 40(%rdi)\n"
        "    leaq 8(%rsp), %rdx\n" /* the caller's rsp once this returns */
        "    movq %rdx, 48(%rdi)\n"
        "    movq (%rsp), %rdx\n" /* the return address */
        "    movq %rdx, 56(%rdi)\n"
        "    stmxcsr 64(%rdi)\n"
        "    fnstcw 68(%rdi)\n"
        "    xorl %eax, %eax\n"
        "    ret\n"
        ".size context_save, .-context_save\n"
        ".globl context_resume\n"
        ".type context_resume,@function\n"
        "context_resume:\n"
        "    ldmxcsr 64(%rdi)\n"
        "    fldcw 68(%rdi)\n"
        "    movq 0(%rdi), %rbx\n"
        "    movq 8(%rdi), %rbp\n"
        "    movq 16(%rdi), %r12\n"
        "    movq 24(%rdi), %r13\n"
        "    movq 32(%rdi), %r14\n"
        "    movq 40(%rdi), %r15\n"
        "    movq 48(%rdi), %rsp\n"
        "    movq %rsi, %rax\n"
        "    jmp *56(%rdi)\n"
        ".size context_resume, .-context_resume\n");
#else
uint64_t context_save(saved_context *context)
{
    (void)context;
    return 0;
}

void context_resume(const saved_context *context, uint64_t value)
{
    (void)context, (void)value;
    __builtin_trap();
}
#endif
