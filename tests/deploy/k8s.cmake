# The Kubernetes manifests (docker/k8s) against the Kubernetes OpenAPI schemas
# (kubernetes-models, from npm) and the project's own checks, and the validator failing
# each of a set of broken copies (tests/deploy/k8s_test.sh). node_modules is installed by
# `npm ci` into the build folder, never the source tree; the npm registry must be
# reachable the first time.
find_program(GEMM_NODE node)
find_program(GEMM_NPM npm)
if(GEMM_NODE AND GEMM_NPM)
  add_test(NAME k8s_manifests_test
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/k8s_test.sh ${PROJECT_SOURCE_DIR}
                   ${CMAKE_CURRENT_BINARY_DIR}/k8s_validate)
else()
  add_test(NAME k8s_manifests_test
           COMMAND sh -c "echo 'SKIP: node or npm not found (dev.sh installs them); the Kubernetes manifests are not validated'; exit 77")
endif()
# 77: k8s_test.sh's own skip, when node or npm is not on the test's PATH.
set_tests_properties(k8s_manifests_test PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS deploy)
