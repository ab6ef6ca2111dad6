#!/usr/bin/env bash
# The AVX-512 build of the float32 kernels must define nothing the linker could take for another file's copy: every
# inline function it instantiates (Eigen's, with AVX-512 instructions) has to live in its renamed Eigen namespace, or
# a CPU without AVX-512 could run it through the portable code. Exit 1 naming any other definition, 77 when the build
# has no AVX-512 object (not x86-64).
# Usage: avx512_symbols.sh "OBJECTS"   (the probes library's objects, ';'-separated, as CMake lists them)
set -euo pipefail
object=
IFS=';' read -r -a objects <<<"$1"
for candidate in "${objects[@]}"; do
  [[ $candidate == *float_kernels_avx512* ]] && object=$candidate
done
if [[ -z $object ]]; then
  echo "no float_kernels_avx512 object among the probes library's objects: nothing to check"
  exit 77
fi
# Global, weak and unique definitions (nm's upper-case classes, u, V, W), the kernels' own three excepted, and the
# reference to the C++ personality routine, which is the same in every file.
strays=$(nm -C --defined-only "$object" | awk '$2 ~ /^[A-Zuvw]$/' |
  grep -v -e 'attncheck_eigen_avx512::' -e 'attncheck::probes::float_kernels::avx512::' -e 'DW.ref.__gxx_personality_v0' || true)
if [[ -n $strays ]]; then
  echo "$object defines symbols outside its renamed Eigen namespace:"
  echo "$strays"
  exit 1
fi
count=$(nm -C --defined-only "$object" | awk '$2 ~ /^[A-Zuvw]$/' | grep -c 'attncheck_eigen_avx512::' || true)
echo "float_kernels_avx512: $count Eigen definitions, all in attncheck_eigen_avx512"
