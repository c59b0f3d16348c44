# Runs a program and checks how it ended and what it printed, for ctest cases
# that a gtest cannot check from inside (exit summaries, load-time warnings).
#
#   cmake -DPROGRAM=<path> [-DARGS=a;b] -DEXPECT_LINE=<text> [-DEXPECT_COUNT=n]
#         -P expect_output.cmake
#
# Passes only if the program exits 0 and exactly EXPECT_COUNT (default 1)
# lines of its stdout+stderr contain EXPECT_LINE (compared as plain text, not
# as a regular expression). With EXPECT_WHOLE_LINE=ON a line must equal it.
if(NOT DEFINED EXPECT_COUNT)
  set(EXPECT_COUNT 1)
endif()
execute_process(
  COMMAND "${PROGRAM}" ${ARGS}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE out)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "${PROGRAM} exited with ${rc}; output:\n${out}")
endif()
string(REPLACE ";" "\\;" out "${out}")
string(REPLACE "\n" ";" lines "${out}")
set(count 0)
foreach(line IN LISTS lines)
  if(EXPECT_WHOLE_LINE)
    if(line STREQUAL EXPECT_LINE)
      math(EXPR count "${count} + 1")
    endif()
  else()
    string(FIND "${line}" "${EXPECT_LINE}" at)
    if(NOT at EQUAL -1)
      math(EXPR count "${count} + 1")
    endif()
  endif()
endforeach()
if(NOT count EQUAL EXPECT_COUNT)
  message(FATAL_ERROR
    "expected ${EXPECT_COUNT} line(s) with: ${EXPECT_LINE}\nfound ${count}; output:\n${out}")
endif()
