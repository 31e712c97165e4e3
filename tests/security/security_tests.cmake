# Security: TLS and mutual TLS (certificates made per run by make_test_certs.sh, with
# Debian's openssl), --metrics_host.
add_executable(tls_test ${CMAKE_CURRENT_LIST_DIR}/tls_test.cc)
target_link_libraries(tls_test PRIVATE gemm_server_lib gemm_client GTest::gtest_main)
target_compile_definitions(tls_test PRIVATE GEMMD_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
gtest_discover_tests(tls_test DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 120 LABELS security)

# Tenants and tokens: the tokens file, UNAUTHENTICATED, health open, the tenant label,
# resident tensors per tenant, SIGHUP-style reloads.
add_executable(auth_test ${CMAKE_CURRENT_LIST_DIR}/auth_test.cc)
target_link_libraries(auth_test PRIVATE gemm_server_lib gemm_client GTest::gtest_main)
gtest_discover_tests(auth_test DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 120 LABELS security)
