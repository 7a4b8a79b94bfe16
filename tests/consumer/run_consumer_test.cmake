# ctest driver: install this build into a scratch prefix, then configure, build
# and run tests/consumer against it with find_package(circlerope).
foreach(var SOURCE_DIR BINARY_DIR WORK_DIR GENERATOR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer_test.cmake needs -D${var}=...")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
run(${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${WORK_DIR}/prefix)
# A sanitized circlerope needs the sanitizer runtime in the consumer's link.
set(flags "")
if(SANITIZE)
  set(flags "-fsanitize=address,undefined")
endif()
set(compiler "")
if(CXX_COMPILER)
  set(compiler "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix "-DCMAKE_CXX_FLAGS=${flags}" ${compiler})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)

# With the PyTorch component: the installed Python package imports and runs from the prefix.
if(PYTHON)
  run(${CMAKE_COMMAND} -E env PYTHONPATH=${WORK_DIR}/prefix/${PYTHON_DIR}
      ${PYTHON} ${SOURCE_DIR}/tests/consumer/consumer.py)
endif()
