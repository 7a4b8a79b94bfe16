# ctest driver: configure, build and run tests/consumer/embed, which embeds this source tree
# with add_subdirectory, then install that project and check that nothing of circlerope was
# installed with it (CIRCLEROPE_INSTALL is off when circlerope is not the top-level project).
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
require_variables(SOURCE_DIR WORK_DIR GENERATOR)
file(REMOVE_RECURSE ${WORK_DIR})
consumer_configure_arguments(arguments)
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer/embed -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCIRCLEROPE_SOURCE_DIR=${SOURCE_DIR} -DCMAKE_BUILD_TYPE=Release ${arguments})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build --target consumer)
run(${WORK_DIR}/build/consumer)
run(${CMAKE_COMMAND} --install ${WORK_DIR}/build --prefix ${WORK_DIR}/prefix)
file(GLOB_RECURSE installed RELATIVE ${WORK_DIR}/prefix ${WORK_DIR}/prefix/*)
if(NOT installed STREQUAL "bin/consumer")
  message(FATAL_ERROR "installing the embedding project installed more than its own program: ${installed}")
endif()
message(STATUS "embedded with add_subdirectory: built, ran, and installed only bin/consumer")
