# Boot sector of the AVX-512 emulator test image: loads the guest (LBA 1 onward, a fixed
# kSectors sectors) to linear 0x8000 with BIOS int 13h extensions, then jumps to it in real
# mode. The image builder (build_guest.cmake) pads the guest to exactly that size.
.set kSectors, 1024          # 512 KiB: 0x8000 + 0x80000 stays below the EBDA at 0x9FC00
.code16
.section .text
.globl _mbr
_mbr:
  cli
  xor %ax, %ax
  mov %ax, %ds
  mov %ax, %es
  mov %ax, %ss
  mov $0x7C00, %sp
  mov %dl, drive
  mov $kSectors, %cx
1:
  mov %cx, %bx                # this call: min(left, 64) sectors (32 KiB, one segment)
  cmp $64, %bx
  jbe 2f
  mov $64, %bx
2:
  mov %bx, dap_count
  mov $0x42, %ah
  mov drive, %dl
  mov $dap, %si
  int $0x13
  jc fail
  mov %bx, %ax                # next segment: 512 / 16 = 32 paragraphs per sector
  shl $5, %ax
  add %ax, dap_segment
  add %bx, dap_lba
  sub %bx, %cx
  jnz 1b
  ljmp $0, $0x8000
fail:
  mov $'!', %al               # "!" on the debug port: the disk read failed
  out %al, $0xE9
  hlt
  jmp fail
.balign 4
dap:                          # int 13h AH=42h disk address packet
  .byte 16, 0
dap_count:
  .word 0
  .word 0                     # buffer offset
dap_segment:
  .word 0x0800                # buffer segment: 0x8000 >> 4
dap_lba:
  .long 1, 0
drive:
  .byte 0
.org 510
  .byte 0x55, 0xAA
