/* kernel_channel — the daemon's channel (docs/kernel-protocol.md) as a kernel that is not Python
 * sees it. cellbox-kernel's language host (language_host.c: bash, and Node's kernel) and its
 * Jupyter bridge (jupyter_bridge.c) read requests from it and write frames to it through this
 * module, which keeps the kernel's half of the ordering rule (fd 1 and 2 drained before every
 * frame) and takes a new channel when a restarted daemon sends one (the adoption switch), so no
 * language kernel has to. */
#ifndef CELLBOX_RUNTIME_KERNEL_CHANNEL_H
#define CELLBOX_RUNTIME_KERNEL_CHANNEL_H

#include <jansson.h>
#include <stddef.h>

typedef struct kernel_channel kernel_channel;

/* The number of `--channel-fd=N`'s N: a non-negative int, nothing else (no sign, junk or
   overflow). -1 when it is not one. */
int kernel_channel_parse_fd(const char *text);

/* Takes `fd` (the inherited --channel-fd) and makes it non-blocking. NULL when out of memory. */
kernel_channel *kernel_channel_open(int fd);
void kernel_channel_close(kernel_channel *channel);
/* The descriptor to poll for input. It changes after an adoption switch: poll it afresh each
   round. */
int kernel_channel_fd(const kernel_channel *channel);

/* Called once for each whole frame received: a JSON object, borrowed for the call. */
typedef void (*kernel_channel_frame_handler)(void *arg, json_t *frame);
/* Called after an adoption switch: the caller's first frame on the new channel must be iopub
   `status` (busy with the request it is handling as parent, or idle without one). */
typedef void (*kernel_channel_switch_handler)(void *arg);

/* Reads what is there without blocking and hands over each whole frame. Descriptors arriving
   with SCM_RIGHTS replace the channel as docs/kernel-protocol.md "Adoption" says (whole frames
   before the marker are still handed over; half a frame is dropped with a line on stderr), then
   on_switch is called. 0, or -1 at end of file or when the daemon sent something that is not a
   frame of a JSON object (the kernel then exits: there is no one left to serve). */
int kernel_channel_read(kernel_channel *channel, kernel_channel_frame_handler on_frame,
                        kernel_channel_switch_handler on_switch, void *arg);
/* (Added.) Every send first reads what is waiting, with the handlers of the last
   kernel_channel_read, so that a new channel sent by an adopting daemon is taken before the frame
   is written (the frame then goes to the new daemon, after on_switch's status). So on_frame
   must only keep the frame for later, and may be called from within a send; a send never reads
   from inside a handler. An end of file seen there is reported by the next kernel_channel_read. */

/* Sends one frame, a JSON object carrying "channel": first waits until fd 1 and 2 are drained
   (ioctl FIONREAD reads 0; polls briefly, gives up after a second), so output written before it
   is published before it; then writes it whole, blocking. 0, or -1 when the channel is gone. */
int kernel_channel_send(kernel_channel *channel, json_t *frame);
/* The same for a frame already serialised (a child kernel's frame relayed as it came). */
int kernel_channel_send_raw(kernel_channel *channel, const char *json, size_t length);

#endif
