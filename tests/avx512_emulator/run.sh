#!/usr/bin/env bash
# The AVX-512 emulator test (ctest avx512_emulator): boots the guest image in Bochs with an
# AVX-512 CPU model, then checks the guest's verdict and that its avx2 digests (rotation, ring)
# equal the ones this machine's CPU computes natively (host program). Exit 77 (ctest: skipped, with the
# reason printed) when Bochs is not installed: then the avx512 path was NOT executed.
# Usage: run.sh IMAGE HOST_PROGRAM WORK_DIR
set -uo pipefail
image=$1 host=$2 work=$3
bios=/usr/share/bochs/BIOS-bochs-latest
vga=/usr/share/bochs/VGABIOS-lgpl-latest
if ! command -v bochs >/dev/null || [[ ! -f $bios || ! -f $vga ]]; then
  echo "SKIPPED: the avx512 path was not executed: Bochs is not installed" \
       "(apt-get install bochs bochsbios vgabios; scripts/setup.sh does)"
  exit 77
fi
mkdir -p "$work"
cd "$work" || exit 1
# tigerlake: AVX-512 F/BW/VL/DQ/CD/IFMA/VBMI..., FMA, F16C; no AVX512_BF16 in Bochs 2.7.
# The debugger build of Debian's Bochs stops at a prompt: the rc file continues and quits.
cat > bochsrc <<RC
megs: 256
romimage: file=$bios
vgaromimage: file=$vga
cpu: model=tigerlake, count=1, ips=200000000, reset_on_triple_fault=0
ata0-master: type=disk, path=$image, mode=flat
boot: disk
display_library: rfb, options="timeout=0"
port_e9_hack: enabled=1
speaker: enabled=0
sound: waveoutdrv=dummy, waveindrv=dummy, midioutdrv=dummy
log: bochs.log
panic: action=fatal
error: action=report
info: action=ignore
debug: action=ignore
clock: sync=none
RC
printf 'c\nquit\n' > debugger.rc
timeout 300 bochs -q -f bochsrc -rc debugger.rc > guest.out 2> bochs.err
status=$?
# The guest's lines, without Bochs' banner and debugger chatter.
sed -n '/AVX512-EMULATOR: guest running/,/AVX512-EMULATOR: \(ALL OK\|FAILED\)/p' guest.out
if ! grep -q "AVX512-EMULATOR: guest running" guest.out; then
  echo "the guest did not start (bochs exit status $status); bochs said:"
  grep -v "^0000" bochs.err | tail -20
  tail -20 bochs.log 2>/dev/null
  exit 1
fi
grep -q "^AVX512-EMULATOR: ALL OK" guest.out || { echo "guest FAILED (bochs exit status $status)"; exit 1; }
digests() { grep "avx2 digests:" | awk '{print $4, $6, $8}'; }
read -r g32 gbf g16 <<< "$(digests < guest.out)"
host_out=$("$host")
host_status=$?
echo "$host_out"
if [[ $host_status -eq 77 ]]; then
  echo "(no native avx2 here: the emulator's avx2 results were not compared with a real CPU's)"
  exit 0
fi
read -r h32 hbf h16 <<< "$(digests <<< "$host_out")"
if [[ $host_status -ne 0 || -z $g32 || $g32 != "$h32" || $gbf != "$hbf" ]]; then
  echo "FAILED: the emulated avx2 digests (float32 $g32, bfloat16 $gbf) differ from this CPU's ($h32, $hbf)"
  exit 1
fi
g_ring=$(grep "avx2 ring digest:" guest.out | awk '{print $4}')
h_ring=$(grep "avx2 ring digest:" <<< "$host_out" | awk '{print $4}')
if [[ -z $g_ring || $g_ring != "$h_ring" ]]; then
  echo "FAILED: the emulated avx2 ring digest $g_ring differs from this CPU's $h_ring"
  exit 1
fi
if grep -q "VCVTPS2PH rounds ties to even" guest.out; then
  [[ $g16 == "$h16" ]] || { echo "FAILED: the emulated avx2 float16 digest $g16 differs from this CPU's $h16"; exit 1; }
  echo "emulated avx2 = native avx2 for every dtype and the ring; avx512 = avx2 byte for byte in the emulator"
else
  echo "emulated avx2 = native avx2 for float32, bfloat16 and the ring (float16 not comparable: the"
  echo "emulator's VCVTPS2PH ties); avx512 = avx2 byte for byte in the emulator for every dtype and the ring"
fi
