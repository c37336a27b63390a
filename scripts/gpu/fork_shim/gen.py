"""Writes one x86-64 trampoline per CUDA runtime function named in the file given: it saves the
argument registers, asks vt_shim_enter(index) which function to run (the runtime's own, or the
child's answer), restores them and jumps there, so any signature passes through unchanged."""
import sys

names = [n.strip() for n in open(sys.argv[1]) if n.strip()]
print("    .text")
print("    .section .data.rel.ro\n    .globl vt_shim_count\nvt_shim_count: .long %d" % len(names))
print("    .globl vt_shim_names\nvt_shim_names:")
for i, n in enumerate(names):
    print("    .quad .Lname%d" % i)
for i, n in enumerate(names):
    print('.Lname%d: .asciz "%s"' % (i, n))
print("    .text")
for i, n in enumerate(names):
    print("""    .globl {n}
    .type {n},@function
{n}:
    push %rdi; push %rsi; push %rdx; push %rcx; push %r8; push %r9; push %rax
    sub $128, %rsp
    movdqu %xmm0, 0(%rsp); movdqu %xmm1, 16(%rsp); movdqu %xmm2, 32(%rsp)
    movdqu %xmm3, 48(%rsp); movdqu %xmm4, 64(%rsp); movdqu %xmm5, 80(%rsp)
    movdqu %xmm6, 96(%rsp); movdqu %xmm7, 112(%rsp)
    mov ${i}, %edi
    call vt_shim_enter@PLT
    mov %rax, %r11
    movdqu 0(%rsp), %xmm0; movdqu 16(%rsp), %xmm1; movdqu 32(%rsp), %xmm2
    movdqu 48(%rsp), %xmm3; movdqu 64(%rsp), %xmm4; movdqu 80(%rsp), %xmm5
    movdqu 96(%rsp), %xmm6; movdqu 112(%rsp), %xmm7
    add $128, %rsp
    pop %rax; pop %r9; pop %r8; pop %rcx; pop %rdx; pop %rsi; pop %rdi
    jmp *%r11
    .size {n}, .-{n}""".format(n=n, i=i))
print('    .section .note.GNU-stack,"",@progbits')
