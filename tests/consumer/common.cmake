# Shared by the consumer drivers (cmake -P): the -D variables each needs, and run(), which
# stops with the command's output when it fails.
function(require_variables)
  foreach(var ${ARGN})
    if(NOT DEFINED ${var})
      message(FATAL_ERROR "${CMAKE_CURRENT_LIST_FILE} needs -D${var}=...")
    endif()
  endforeach()
endfunction()

function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

# The configure arguments that build the consumer like this build: the sanitizers' flags
# (a sanitized circlerope needs their runtime in the consumer's link) and the same compilers
# (a static libcirclerope_kernels built by clang calls libomp, by g++ libgomp).
function(consumer_configure_arguments out)
  set(flags "")
  if(SANITIZE)
    set(flags "-fsanitize=address,undefined")
  endif()
  set(arguments "-DCMAKE_CXX_FLAGS=${flags}" "-DCMAKE_C_FLAGS=${flags}")
  if(CXX_COMPILER)
    list(APPEND arguments "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
  endif()
  if(C_COMPILER)
    list(APPEND arguments "-DCMAKE_C_COMPILER=${C_COMPILER}")
  endif()
  set(${out} ${arguments} PARENT_SCOPE)
endfunction()
