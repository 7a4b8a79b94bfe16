# ctest driver (cmake -P): the include lines follow docs/design.md's layers.
#  - src/cpu and src/reference (kernels): quoted includes are public headers
#    ("circlerope/...") or files of their own directory; no "../".
#  - src/core (core): the same, and no third-party header at all.
#  - src/cuda (kernels, CUDA backend): the same, and the CPU backend's validation and C
#    conversions ("../cpu/"), which both backends share so that they refuse the same input.
#  - python/bindings.cpp (the torch-free _core module): no torch, ATen or torch/ header.
if(NOT DEFINED SOURCE_DIR)
  message(FATAL_ERROR "layering.cmake needs -DSOURCE_DIR=...")
endif()
set(problems "")

function(check_directory dir)
  set(allowed "${ARGN}")  # a relative prefix this directory may reach, e.g. ../cpu/
  file(GLOB files ${SOURCE_DIR}/${dir}/*.cpp ${SOURCE_DIR}/${dir}/*.h ${SOURCE_DIR}/${dir}/*.cu)
  foreach(file ${files})
    file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include")
    get_filename_component(name ${file} NAME)
    foreach(line ${lines})
      if(line MATCHES "#[ \t]*include[ \t]*\"([^\"]+)\"")
        set(included ${CMAKE_MATCH_1})
        if(allowed AND included MATCHES "^${allowed}" AND EXISTS ${SOURCE_DIR}/${dir}/${included})
          # shared within the layer
        elseif(NOT included MATCHES "^circlerope/" AND NOT EXISTS ${SOURCE_DIR}/${dir}/${included})
          list(APPEND problems "${dir}/${name}: ${line} (neither a public header nor one of ${dir}/)")
        elseif(included MATCHES "\\.\\./")
          list(APPEND problems "${dir}/${name}: ${line} (reaches into another layer)")
        endif()
      elseif(line MATCHES "#[ \t]*include[ \t]*<([^>]+)>")
        if(CMAKE_MATCH_1 MATCHES "^(nlohmann|CLI|torch|ATen|c10|pybind11|benchmark|gtest|gmock)/")
          list(APPEND problems "${dir}/${name}: ${line} (a third-party header below the front ends)")
        endif()
      endif()
    endforeach()
  endforeach()
  set(problems ${problems} PARENT_SCOPE)
endfunction()

check_directory(src/core)
check_directory(src/cpu)
check_directory(src/reference)
check_directory(src/cuda "\\.\\./cpu/")

file(STRINGS ${SOURCE_DIR}/python/bindings.cpp lines REGEX "^[ \t]*#[ \t]*include")
foreach(line ${lines})
  if(line MATCHES "torch|ATen|c10/|config_args")
    list(APPEND problems "python/bindings.cpp: ${line} (the _core module is torch-free)")
  endif()
endforeach()

if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "layering violations:\n  ${text}")
endif()
message(STATUS "layering: src/core, src/cpu, src/reference, src/cuda and python/bindings.cpp include what their layer may")
