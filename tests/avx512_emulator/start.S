# Guest entry at 0x8000 (loaded by mbr.S): real mode -> 64-bit long mode with the first GiB
# identity-mapped in 2 MiB pages (page tables at 0x1000-0x3FFF), SSE, AVX and AVX-512
# state enabled in CR0/CR4/XCR0 as far as CPUID leaf 0xD reports them, an IDT whose
# handlers report the exception through guest_exception(), then guest_main(). Afterwards
# (or from guest_shutdown) Bochs' shutdown port ends the emulator.
.section .text.start, "ax"
.code16
.globl _start16
_start16:
  cli
  in $0x92, %al               # fast A20
  or $2, %al
  and $0xFE, %al
  out %al, $0x92
  xor %ax, %ax
  mov %ax, %es
  mov $0x1000, %di            # clear PML4, PDPT, PD
  mov $0xC00, %cx
  xor %eax, %eax
  cld
  rep stosl
  movl $0x2003, 0x1000        # PML4[0] -> PDPT, present + writable
  movl $0x3003, 0x2000        # PDPT[0] -> PD
  mov $0x3000, %di            # PD[i] = i * 2 MiB, present + writable + large page
  mov $0x83, %eax
  mov $512, %cx
1:
  mov %eax, (%di)
  movl $0, 4(%di)
  add $0x200000, %eax
  add $8, %di
  loop 1b
  mov $0x1000, %eax
  mov %eax, %cr3
  mov %cr4, %eax
  or $(1 << 5), %eax          # PAE
  mov %eax, %cr4
  mov $0xC0000080, %ecx       # EFER.LME
  rdmsr
  or $(1 << 8), %eax
  wrmsr
  lgdtl gdt_desc
  mov %cr0, %eax
  or $0x80000001, %eax        # PG + PE
  mov %eax, %cr0
  ljmpl $0x08, $long_entry
.balign 8                     # within the first 64 KiB: 16-bit code addresses it
gdt:
  .quad 0
  .quad 0x00AF9A000000FFFF    # 64-bit code
  .quad 0x00CF92000000FFFF    # data
gdt_desc:
  .word 23
  .long gdt
.code64
long_entry:
  mov $0x10, %ax
  mov %ax, %ds
  mov %ax, %es
  mov %ax, %ss
  mov %ax, %fs
  mov %ax, %gs
  mov %cr0, %rax
  and $~4, %rax               # EM off
  or $2, %rax                 # MP on
  mov %rax, %cr0
  mov %cr4, %rax
  or $((1 << 9) | (1 << 10) | (1 << 18)), %rax  # OSFXSR, OSXMMEXCPT, OSXSAVE
  mov %rax, %cr4
  mov $0xD, %eax              # XCR0 = x87 | SSE | AVX | opmask | ZMM_Hi256 | Hi16_ZMM
  xor %ecx, %ecx              #        as far as CPUID.(0xD,0):EAX supports them
  cpuid
  and $0xE7, %eax
  xor %edx, %edx
  xor %ecx, %ecx
  xsetbv
  mov $stack_top, %rsp
  call guest_main
.globl guest_shutdown
guest_shutdown:
  mov $0x8900, %dx
  lea shutdown_text(%rip), %rsi
  mov $8, %ecx
2:
  lodsb
  out %al, %dx
  loop 2b
3:
  cli
  hlt
  jmp 3b
shutdown_text:
  .ascii "Shutdown"

# Exception stubs: push a dummy error code where the CPU pushes none, then the vector;
# guest_exception(frame) never returns.
.macro isr vector, has_error
isr\vector:
  .if \has_error == 0
  push $0
  .endif
  push $\vector
  mov %rsp, %rdi
  and $-16, %rsp
  call guest_exception
  jmp guest_shutdown
.endm
isr 0, 0
isr 1, 0
isr 2, 0
isr 3, 0
isr 4, 0
isr 5, 0
isr 6, 0
isr 7, 0
isr 8, 1
isr 9, 0
isr 10, 1
isr 11, 1
isr 12, 1
isr 13, 1
isr 14, 1
isr 15, 0
isr 16, 0
isr 17, 1
isr 18, 0
isr 19, 0
isr 20, 0
isr 21, 1
.section .rodata
.balign 8
.globl guest_isr_table
guest_isr_table:
  .quad isr0, isr1, isr2, isr3, isr4, isr5, isr6, isr7, isr8, isr9, isr10
  .quad isr11, isr12, isr13, isr14, isr15, isr16, isr17, isr18, isr19, isr20, isr21
.globl guest_isr_count
guest_isr_count:
  .quad 22
.section .stack, "aw", @nobits
.balign 16
  .skip 1 << 20
stack_top:
.section .note.GNU-stack, "", @progbits
