# run_standalone.cmake: compile a CUDA source exactly as cuda/sim/README.md says, then run it.
#   cmake -DCXX=... -DINCLUDE=<src>/cuda/sim/include -DLIB=<build>/libemc_cudasim.a
#         -DSRC=standalone.cu -DOUT=<binary> [-DFLAGS=<sanitizer flags, |-separated>]
#         -DEXPECT=<regex of its stdout> -P run_standalone.cmake
# README's line: c++ -std=c++17 -I cuda/sim/include -x c++ FILE.cu -x none BUILD/libemc_cudasim.a -pthread
# (FLAGS: the sanitizers the library was built with, which its objects need at link time;
# separated by "|" since add_test would split a ;-list.)
foreach(v CXX INCLUDE LIB SRC OUT EXPECT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_standalone.cmake: -D${v}= is missing")
  endif()
endforeach()
string(REPLACE "|" ";" FLAGS "${FLAGS}")
set(cmd ${CXX} -std=c++17 -I ${INCLUDE} -x c++ ${SRC} -x none ${LIB} -pthread ${FLAGS} -o ${OUT})
string(REPLACE ";" " " shown "${cmd}")
message(STATUS "compile: ${shown}")
execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the README's compile line failed (${rc}):\n${out}${err}")
endif()
execute_process(COMMAND ${OUT} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
message(STATUS "run: ${OUT}: status ${rc}\n${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the standalone program failed (status ${rc})")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "the standalone program's output does not match '${EXPECT}'")
endif()
