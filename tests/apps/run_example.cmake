# SPDX-License-Identifier: MIT
# Runs an example program (PROGRAM, with ARGS, separated by spaces) and checks its exit status (0) and its standard output
# (EXPECT, a regular expression it must match): ctest's PASS_REGULAR_EXPRESSION alone would ignore the status.
#   cmake -DPROGRAM=... -DARGS=... -DEXPECT=... -P run_example.cmake
separate_arguments(arguments UNIX_COMMAND "${ARGS}")
execute_process(COMMAND ${PROGRAM} ${arguments} RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE errors)
message("${output}${errors}")
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} exited with ${status}")
endif()
if(NOT output MATCHES "${EXPECT}")
  message(FATAL_ERROR "${PROGRAM}'s output does not match '${EXPECT}'")
endif()
