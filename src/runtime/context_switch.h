/* context_switch — a process's own registers kept and jumped back to, for the checkpoint point
 * (checkpoint_point.h): like setjmp/longjmp, without glibc's pointer mangling (the mangling key
 * lives in the TCB, which a restore puts back anyway) or longjmp's checks that the target frame
 * is below the current stack (a restore jumps from another stack entirely).
 *
 * x86_64 only; elsewhere CONTEXT_SWITCH_SUPPORTED is 0 and checkpoints are refused. */
#ifndef CELLBOX_RUNTIME_CONTEXT_SWITCH_H
#define CELLBOX_RUNTIME_CONTEXT_SWITCH_H

#include <stdint.h>

#if defined(__x86_64__)
#define CONTEXT_SWITCH_SUPPORTED 1
#else
#define CONTEXT_SWITCH_SUPPORTED 0
#endif

/* The callee-saved registers, the stack pointer and the resume address (the System V ABI's
   caller-saved registers are dead across a call), and the floating-point control words. */
typedef struct saved_context {
    uint64_t rbx, rbp, r12, r13, r14, r15;
    uint64_t rsp; /* the caller's stack pointer after the return */
    uint64_t rip; /* the return address */
    uint32_t mxcsr;
    uint16_t x87_control;
    uint16_t padding;
} saved_context;

/* Returns 0 when it saves; returns `value` (not 0) when context_resume jumps back. */
uint64_t context_save(saved_context *context) __attribute__((returns_twice));
/* Never returns: context_save returns `value` again, with the registers it saved. */
void context_resume(const saved_context *context, uint64_t value) __attribute__((noreturn));

#endif
