# cmake -DLIBRARIES="a.so;b.so" -P exports.cmake: none of the libraries exports libstdc++'s
# own symbols (what a statically linked copy brings: codecvt members, ios_base::Init).
foreach(lib ${LIBRARIES})
  execute_process(COMMAND nm -D --defined-only ${lib} OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "nm failed on ${lib}")
  endif()
  string(REGEX MATCHALL "codecvt|ios_base4Init" copies "${symbols}")
  list(LENGTH copies n)
  message(STATUS "${lib}: ${n}")
  if(n GREATER 0)
    message(FATAL_ERROR "${lib} exports ${n} of libstdc++'s own symbols: it carries a static copy")
  endif()
endforeach()
