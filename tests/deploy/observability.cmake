# Prometheus in the loop: docker/prometheus (scrape config, rules, alerts), docker/grafana
# (dashboard) and docker/compose.yaml checked with promtool and docker-compose, then run
# against a real gemm-server and Debian's prometheus (apt: prometheus, docker-compose).
# Without those tools the test reports itself skipped (exit 77) and names them, rather
# than vanishing from the list.
if(GEMM_DEBIAN_PYTHON)
  find_program(GEMM_PROMETHEUS prometheus)
  find_program(GEMM_PROMTOOL promtool)
  find_program(GEMM_DOCKER_COMPOSE docker-compose)
  add_test(NAME observability_test
           COMMAND ${GEMM_DEBIAN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/observability_test.py
                   $<TARGET_FILE:gemm-server> $<TARGET_FILE:gemm-cli> ${PROJECT_SOURCE_DIR})
  set_tests_properties(observability_test PROPERTIES
                       # Takes 10-15 s on the 2-core development machine.
                       TIMEOUT 120
                       LABELS "deploy;observability"
                       SKIP_RETURN_CODE 77
                       ENVIRONMENT "PROMETHEUS=${GEMM_PROMETHEUS};PROMTOOL=${GEMM_PROMTOOL};DOCKER_COMPOSE=${GEMM_DOCKER_COMPOSE}")
endif()
