# Sanitizer builds: -DVRAMTRACE_SANITIZE=address,undefined (ASan + UBSan) or =thread (TSan).
#
# Every target of ours (preload library, collector, report, CLI, unit/e2e tests, fuzzers) is
# compiled and linked with the sanitizers. The CPU stand-in and the CUDA test programs are not:
# they play the part of the user's unchanged program. A sanitized libvramtrace.so preloaded into
# an unsanitized program needs the sanitizer runtime loaded before anything else, so in these
# builds the launcher (cli/launcher.cpp, VRAMTRACE_SANITIZER_PRELOAD) and the e2e tests
# (VT_SANITIZER_PRELOAD) put the runtime first in LD_PRELOAD. Build with GCC: its sanitizer
# runtimes are shared libraries, which the preload library's -Wl,-z,defs needs.
set(VRAMTRACE_SANITIZE "" CACHE STRING
    "Build with sanitizers: address,undefined or thread (empty: none)")

set(VT_SANITIZE_FLAGS "")
set(VT_SANITIZER_RUNTIME "")
if(VRAMTRACE_SANITIZE)
  if(NOT VRAMTRACE_SANITIZE MATCHES "^(address,undefined|address|undefined|thread)$")
    message(FATAL_ERROR "VRAMTRACE_SANITIZE: '${VRAMTRACE_SANITIZE}' is not one of "
                        "address,undefined / address / undefined / thread")
  endif()
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    message(FATAL_ERROR "VRAMTRACE_SANITIZE needs GCC (shared sanitizer runtimes)")
  endif()
  set(VT_SANITIZE_FLAGS -fsanitize=${VRAMTRACE_SANITIZE} -fno-omit-frame-pointer -g)
  if(VRAMTRACE_SANITIZE MATCHES "undefined")
    # A UBSan finding fails the test instead of scrolling past.
    list(APPEND VT_SANITIZE_FLAGS -fno-sanitize-recover=undefined)
  endif()
  if(VRAMTRACE_SANITIZE MATCHES "address")
    set(_rt libasan.so)
  elseif(VRAMTRACE_SANITIZE MATCHES "thread")
    set(_rt libtsan.so)
  else()
    set(_rt libubsan.so)
  endif()
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=${_rt}
                  OUTPUT_VARIABLE _rt_path OUTPUT_STRIP_TRAILING_WHITESPACE)
  get_filename_component(VT_SANITIZER_RUNTIME "${_rt_path}" REALPATH)
  if(NOT EXISTS "${VT_SANITIZER_RUNTIME}")
    message(FATAL_ERROR "sanitizer runtime ${_rt} not found (${_rt_path})")
  endif()
  message(STATUS "vramtrace: sanitizers ${VRAMTRACE_SANITIZE}, runtime ${VT_SANITIZER_RUNTIME}")
endif()

# vramtrace_sanitize(<target>...): builds those targets with the sanitizers, if any are asked for.
function(vramtrace_sanitize)
  if(NOT VT_SANITIZE_FLAGS)
    return()
  endif()
  foreach(t ${ARGN})
    if(NOT TARGET ${t})
      continue()
    endif()
    target_compile_options(${t} PRIVATE ${VT_SANITIZE_FLAGS})
    target_link_options(${t} PRIVATE ${VT_SANITIZE_FLAGS})
    if(t STREQUAL "vramtrace")
      target_compile_definitions(vramtrace PRIVATE
        VRAMTRACE_SANITIZER_PRELOAD="${VT_SANITIZER_RUNTIME}")
    elseif(t STREQUAL "vt_e2e_tests")
      target_compile_definitions(vt_e2e_tests PRIVATE
        VT_SANITIZER_PRELOAD="${VT_SANITIZER_RUNTIME}:")
    endif()
  endforeach()
endfunction()
