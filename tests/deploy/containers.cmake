# The container images (docker/Dockerfile, docker/Dockerfile.cuda) built with Debian's
# docker.io and checked from outside (tests/deploy/containers_test.py). A ctest fixture
# starts dockerd once (when none answers) and makes the Debian 12 base image once per run;
# the builds then take both cores, so they run alone (RUN_SERIAL) and do not slow the
# timing-sensitive tests beside them. Without docker.io/mmdebstrap each reports itself
# skipped (exit 77).
if(GEMM_DEBIAN_PYTHON)
  set(gemmd_containers_state ${CMAKE_CURRENT_BINARY_DIR}/containers)
  set(gemmd_containers_test ${CMAKE_CURRENT_SOURCE_DIR}/containers_test.py)
  add_test(NAME containers_setup
           COMMAND ${GEMM_DEBIAN_PYTHON} ${gemmd_containers_test} setup ${gemmd_containers_state})
  add_test(NAME containers_cpu_image_test
           COMMAND ${GEMM_DEBIAN_PYTHON} ${gemmd_containers_test} cpu ${gemmd_containers_state}
                   $<TARGET_FILE:gemm-cli>)
  add_test(NAME containers_cuda_image_test
           COMMAND ${GEMM_DEBIAN_PYTHON} ${gemmd_containers_test} cuda ${gemmd_containers_state}
                   $<TARGET_FILE:gemm-cli>)
  add_test(NAME containers_cleanup
           COMMAND ${GEMM_DEBIAN_PYTHON} ${gemmd_containers_test} cleanup ${gemmd_containers_state})
  set_tests_properties(containers_setup PROPERTIES FIXTURES_SETUP gemmd_docker)
  set_tests_properties(containers_cleanup PROPERTIES FIXTURES_CLEANUP gemmd_docker)
  set_tests_properties(containers_cpu_image_test containers_cuda_image_test PROPERTIES
                       FIXTURES_REQUIRED gemmd_docker)
  # Measured on the 2-core development machine: base image ~75 s, CPU image ~2 min,
  # CUDA image ~4 min (apt in the build stage, then the kernels for sm_80 and sm_90).
  set_tests_properties(containers_setup containers_cpu_image_test containers_cuda_image_test
                       containers_cleanup PROPERTIES
                       TIMEOUT 1500
                       RUN_SERIAL TRUE
                       SKIP_RETURN_CODE 77
                       LABELS "deploy;containers")
endif()
