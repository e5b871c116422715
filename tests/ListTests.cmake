# cmake -DBINARY=... -DOUTPUT=... -P ListTests.cmake: after each link of
# sluice_tests, its tests and their rank counts (`--sluice_list_tests`), the
# list tests/Discover.cmake.in turns into CTest entries. Written whole or not at all.
execute_process(COMMAND "${BINARY}" --sluice_list_tests OUTPUT_FILE "${OUTPUT}.tmp" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE "${OUTPUT}.tmp")
  message(FATAL_ERROR "${BINARY} --sluice_list_tests failed (${rc})")
endif()
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
