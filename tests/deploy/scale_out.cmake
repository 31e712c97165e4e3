# Three gemm-server replicas behind one ipv4: target: spread, a replica killed mid-run,
# and its return (tests/deploy/scale_out_test.py).
if(GEMM_DEBIAN_PYTHON)
  add_test(NAME scale_out_test
           COMMAND ${GEMM_DEBIAN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/scale_out_test.py
                   $<TARGET_FILE:gemm-server> $<TARGET_FILE:gemm-cli>)
  set_tests_properties(scale_out_test PROPERTIES TIMEOUT 120 LABELS deploy)
endif()
