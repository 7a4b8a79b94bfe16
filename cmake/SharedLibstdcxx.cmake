# One libstdc++ per process. The libraries share C++ objects (strings, exceptions, streams)
# with libtorch and with each other, so each must link the shared runtime, libstdc++.so.6.
#
# A build on an H200 machine linked a static copy of libstdc++ into libcirclerope.so (261 of
# its internals exported: codecvt members, ios_base::Init), although nothing asked for one:
# a static libstdc++.a met in the link's search path before the shared library does that,
# and libcirclerope_kernels.so then resolved its C++ symbols from the first library's copy,
# never initialised like the shared one, while the rest of the process used libstdc++.so.6.
# The first error message that formatted a number crashed there (a num_put looked up by
# another copy's facet id landed in codecvt::do_unshift).
#
# So every C++ link line names the shared runtime by its soname first (-l:libstdc++.so.6);
# an archive's members are then never needed. Where the compiler does not use libstdc++
# (-stdlib=libc++) or cannot find the shared one, nothing changes. A static runtime asked for
# in the environment's flags (-static-libstdc++, -static-libgcc) is dropped, with a line.
foreach(flags CMAKE_SHARED_LINKER_FLAGS CMAKE_MODULE_LINKER_FLAGS CMAKE_EXE_LINKER_FLAGS CMAKE_CXX_FLAGS
              CMAKE_C_FLAGS)
  foreach(static_runtime -static-libstdc++ -static-libgcc)
    string(FIND "${${flags}}" "${static_runtime}" at)
    if(NOT at EQUAL -1)
      string(REPLACE "${static_runtime}" "" ${flags} "${${flags}}")
      message(STATUS "circlerope: ${static_runtime} dropped from ${flags} (the libraries share libstdc++ with libtorch)")
    endif()
  endforeach()
endforeach()

if(CMAKE_SYSTEM_NAME STREQUAL "Linux" AND NOT CMAKE_CXX_FLAGS MATCHES "-stdlib=libc\\+\\+")
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so.6
                  OUTPUT_VARIABLE circlerope_libstdcxx OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(IS_ABSOLUTE "${circlerope_libstdcxx}" AND EXISTS "${circlerope_libstdcxx}")
    string(FIND "${CMAKE_CXX_STANDARD_LIBRARIES}" "-l:libstdc++.so.6" at)
    if(at EQUAL -1)
      set(CMAKE_CXX_STANDARD_LIBRARIES "-l:libstdc++.so.6 ${CMAKE_CXX_STANDARD_LIBRARIES}")
    endif()
  endif()
endif()
