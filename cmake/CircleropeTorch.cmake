# The PyTorch part's build inputs, taken from the torch that a Python interpreter imports
# (cmake/torch_info.py), not from torch's own CMake package: that package drags in CUDA
# toolkit discovery (GPU probing, cuDNN, NVTX) that fails on machines where the headers and
# libraries are fine, and pip's torch is a CUDA build. What the operators need is the headers,
# libc10/libtorch_cpu/libtorch (plus libc10_cuda/libtorch_cuda for CUDA tensors) and the C++
# ABI flag torch was built with.
#
# Sets CIRCLEROPE_TORCH_FOUND, CIRCLEROPE_TORCH_VERSION, CIRCLEROPE_TORCH_CXX11_ABI,
# CIRCLEROPE_TORCH_CUDA (torch's CUDA version, empty for a CPU build), CIRCLEROPE_TORCH_REASON
# (why not found), and the imported targets circlerope::libtorch (and
# circlerope::libtorch_cuda when torch has CUDA).
function(circlerope_find_torch python)
  set(CIRCLEROPE_TORCH_FOUND OFF PARENT_SCOPE)
  set(info_script ${PROJECT_SOURCE_DIR}/cmake/torch_info.py)
  execute_process(COMMAND ${python} ${info_script} OUTPUT_VARIABLE out ERROR_QUIET RESULT_VARIABLE rc)
  set(outside_isolation OFF)
  if(NOT rc EQUAL 0 OR out MATCHES "(^|\n)error=")
    # Under pip's build isolation, PYTHONPATH hides the environment's own site-packages; -I
    # (isolated mode) ignores PYTHONPATH, so the torch installed in that environment is found.
    execute_process(COMMAND ${python} -I ${info_script} OUTPUT_VARIABLE out_isolated ERROR_QUIET
                    RESULT_VARIABLE rc_isolated)
    if(rc_isolated EQUAL 0 AND NOT out_isolated MATCHES "(^|\n)error=")
      set(out "${out_isolated}")
      set(outside_isolation ON)
    else()
      string(REGEX MATCH "error=[^\n]*" reason "${out}")
      if(NOT reason)
        set(reason "the interpreter failed (exit ${rc})")
      endif()
      set(CIRCLEROPE_TORCH_REASON "${python} cannot import torch (${reason})" PARENT_SCOPE)
      return()
    endif()
  endif()
  string(REPLACE "\n" ";" lines "${out}")
  foreach(line IN LISTS lines)
    if(line MATCHES "^([a-z0-9_]+)=(.*)$")
      set(torch_${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
    endif()
  endforeach()
  # torch_info.py separates directories with | (a ; would split the line above)
  string(REPLACE "|" ";" torch_include_dirs "${torch_include_dirs}")
  string(REPLACE "|" ";" torch_library_dirs "${torch_library_dirs}")
  set(libdir "")
  foreach(dir IN LISTS torch_library_dirs)
    if(EXISTS ${dir}/libtorch_cpu.so)
      set(libdir ${dir})
    endif()
  endforeach()
  if(NOT libdir)
    set(CIRCLEROPE_TORCH_REASON "torch ${torch_full_version} has no libtorch_cpu.so in ${torch_library_dirs}" PARENT_SCOPE)
    return()
  endif()
  if(NOT TARGET circlerope::libtorch)
    add_library(circlerope::libtorch INTERFACE IMPORTED GLOBAL)
    target_include_directories(circlerope::libtorch SYSTEM INTERFACE ${torch_include_dirs})
    # No RPATH to torch's directory: the operator library is loaded after `import torch`, which
    # has loaded these libraries already (a wheel must not point at the build machine's torch).
    target_link_libraries(circlerope::libtorch INTERFACE
      ${libdir}/libc10.so ${libdir}/libtorch_cpu.so ${libdir}/libtorch.so)
    target_compile_definitions(circlerope::libtorch INTERFACE _GLIBCXX_USE_CXX11_ABI=${torch_cxx11_abi})
    if(torch_cuda AND EXISTS ${libdir}/libtorch_cuda.so)
      add_library(circlerope::libtorch_cuda INTERFACE IMPORTED GLOBAL)
      target_link_libraries(circlerope::libtorch_cuda INTERFACE circlerope::libtorch
        ${libdir}/libc10_cuda.so ${libdir}/libtorch_cuda.so)
    endif()
  endif()
  set(CIRCLEROPE_TORCH_FOUND ON PARENT_SCOPE)
  set(CIRCLEROPE_TORCH_VERSION ${torch_version} PARENT_SCOPE)
  set(CIRCLEROPE_TORCH_FULL_VERSION ${torch_full_version} PARENT_SCOPE)
  set(CIRCLEROPE_TORCH_CXX11_ABI ${torch_cxx11_abi} PARENT_SCOPE)
  set(CIRCLEROPE_TORCH_CUDA "${torch_cuda}" PARENT_SCOPE)
  set(CIRCLEROPE_TORCH_INCLUDE_DIRS "${torch_include_dirs}" PARENT_SCOPE)
  set(CIRCLEROPE_TORCH_OUTSIDE_ISOLATION ${outside_isolation} PARENT_SCOPE)
  if(torch_pybind11_dir)
    set(CIRCLEROPE_TORCH_PYBIND11_DIR ${torch_pybind11_dir} PARENT_SCOPE)
  endif()
endfunction()
