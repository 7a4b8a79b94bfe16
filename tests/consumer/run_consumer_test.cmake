# ctest driver: install this build into a scratch prefix, then configure, build
# and run tests/consumer (a C++ and a C program) against it with find_package(circlerope).
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
require_variables(SOURCE_DIR BINARY_DIR WORK_DIR GENERATOR)
file(REMOVE_RECURSE ${WORK_DIR})
run(${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${WORK_DIR}/prefix)
# Shared libraries carry the ABI version in their file names and sonames (major.minor while
# 0.x): libcirclerope.so -> libcirclerope.so.0.1 -> libcirclerope.so.0.1.0.
if(SOVERSION)
  foreach(lib circlerope circlerope_kernels)
    file(GLOB_RECURSE found ${WORK_DIR}/prefix/lib${lib}.so.${SOVERSION})
    if(NOT found)
      message(FATAL_ERROR "lib${lib}.so.${SOVERSION} was not installed")
    endif()
  endforeach()
endif()
consumer_configure_arguments(arguments)
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix ${arguments})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)
run(${WORK_DIR}/build/c_consumer)

# With the PyTorch component: the installed Python package imports and runs from the prefix.
if(PYTHON)
  run(${CMAKE_COMMAND} -E env PYTHONPATH=${WORK_DIR}/prefix/${PYTHON_DIR}
      ${PYTHON} ${SOURCE_DIR}/tests/consumer/consumer.py)
endif()
