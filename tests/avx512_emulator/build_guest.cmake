# Builds the bootable disk image of the AVX-512 emulator test (cmake -P, from
# tests/CMakeLists.txt): the boot sector, the long-mode entry, guest_main.cpp and the
# library's own kernel_portable/avx2/avx512.cpp and positions_avx2/avx512.cpp compiled with
# the library's per-file ISA flags, without the C library, linked at 0x8000 and padded to a disk Bochs autodetects.
#
# In: CXX, LINKER, OBJCOPY, SOURCE_DIR, OUT_DIR, AVX2_FLAGS, AVX512_FLAGS ('|'-separated).
cmake_minimum_required(VERSION 3.20)
foreach(v CXX LINKER OBJCOPY SOURCE_DIR OUT_DIR AVX2_FLAGS AVX512_FLAGS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "build_guest.cmake: ${v} is not set")
  endif()
endforeach()
string(REPLACE "|" ";" avx2_flags "${AVX2_FLAGS}")
string(REPLACE "|" ";" avx512_flags "${AVX512_FLAGS}")
set(here ${SOURCE_DIR}/tests/avx512_emulator)
file(MAKE_DIRECTORY ${OUT_DIR})

# No C library, no unwinding, no stack protector or CET (nothing to back them), no red zone
# (exception handlers run on the same stack), absolute addresses.
set(common -O2 -std=c++20 -fno-exceptions -fno-rtti -fno-asynchronous-unwind-tables
    -fno-unwind-tables -fno-stack-protector -fcf-protection=none -fno-threadsafe-statics
    -mno-red-zone -fno-pic -fno-pie -DCIRCLEROPE_HAVE_X86_KERNELS -DCIRCLEROPE_HAVE_X86_POSITIONS
    -I${SOURCE_DIR}/include -Wno-psabi)
# The library's flags for its kernel files (CMakeLists.txt), minus warnings.
set(kernel -O3 -ffp-contract=fast)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " line "${ARGN}")
    message(FATAL_ERROR "avx512 emulator image: '${line}' failed:\n${out}${err}")
  endif()
endfunction()

run(${CXX} -c ${here}/mbr.S -o ${OUT_DIR}/mbr.o)
run(${LINKER} -m elf_x86_64 -e _mbr -Ttext 0x7C00 --oformat binary ${OUT_DIR}/mbr.o -o ${OUT_DIR}/mbr.bin)
run(${CXX} -c ${here}/start.S -o ${OUT_DIR}/start.o)
run(${CXX} ${common} -c ${here}/guest_main.cpp -o ${OUT_DIR}/guest_main.o)
run(${CXX} ${common} ${kernel} -c ${SOURCE_DIR}/src/cpu/kernel_portable.cpp -o ${OUT_DIR}/kernel_portable.o)
run(${CXX} ${common} ${kernel} ${avx2_flags} -c ${SOURCE_DIR}/src/cpu/kernel_avx2.cpp -o ${OUT_DIR}/kernel_avx2.o)
run(${CXX} ${common} ${kernel} ${avx512_flags} -c ${SOURCE_DIR}/src/cpu/kernel_avx512.cpp -o ${OUT_DIR}/kernel_avx512.o)
run(${CXX} ${common} ${kernel} ${avx2_flags} -c ${SOURCE_DIR}/src/core/positions_avx2.cpp -o ${OUT_DIR}/positions_avx2.o)
run(${CXX} ${common} ${kernel} ${avx512_flags} -c ${SOURCE_DIR}/src/core/positions_avx512.cpp -o ${OUT_DIR}/positions_avx512.o)
execute_process(COMMAND ${CXX} -print-libgcc-file-name OUTPUT_VARIABLE libgcc OUTPUT_STRIP_TRAILING_WHITESPACE)
set(runtime)
if(EXISTS "${libgcc}")
  set(runtime ${libgcc})
endif()
run(${LINKER} -m elf_x86_64 -nostdlib -static -no-pie -T ${here}/link.ld
    ${OUT_DIR}/start.o ${OUT_DIR}/guest_main.o ${OUT_DIR}/kernel_portable.o ${OUT_DIR}/kernel_avx2.o
    ${OUT_DIR}/kernel_avx512.o ${OUT_DIR}/positions_avx2.o ${OUT_DIR}/positions_avx512.o ${runtime}
    -o ${OUT_DIR}/guest.elf)
run(${OBJCOPY} -O binary -j .text -j .rodata -j .data -j .pad ${OUT_DIR}/guest.elf ${OUT_DIR}/guest.bin)
execute_process(COMMAND ${CMAKE_COMMAND} -E cat ${OUT_DIR}/mbr.bin ${OUT_DIR}/guest.bin
                OUTPUT_FILE ${OUT_DIR}/avx512_guest.img RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "avx512 emulator image: writing the image failed")
endif()
file(SIZE ${OUT_DIR}/avx512_guest.img image_size)
if(NOT image_size EQUAL 1032192)
  message(FATAL_ERROR "avx512 emulator image: ${image_size} bytes instead of 1032192")
endif()
