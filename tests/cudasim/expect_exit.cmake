# expect_exit.cmake: run a command that must end with a given status and print a report.
#   cmake -DCMD=<program|args> -DSTATUS=<n> -DEXPECT=<regex of stdout+stderr> -P expect_exit.cmake
# The environment is ctest's (set with the test's ENVIRONMENT property). TIMEOUT is a backstop
# only: the command is expected to end by itself, long before.
foreach(v CMD STATUS EXPECT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "expect_exit.cmake: -D${v}= is missing")
  endif()
endforeach()
string(REPLACE "|" ";" CMD "${CMD}") # add_test would split a ;-list
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
message(STATUS "${CMD}: status ${rc}\n${out}${err}")
if(NOT "${rc}" STREQUAL "${STATUS}")
  message(FATAL_ERROR "status ${rc}, expected ${STATUS}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output does not match '${EXPECT}'")
endif()
