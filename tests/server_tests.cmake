# Tests of the server core and of the whole server in-process (gRPC on 127.0.0.1:0).
add_executable(server_unit_test
  matmul_validation_test.cc
  arena_plan_test.cc
  batch_queues_test.cc
  block_pool_test.cc
  batcher_test.cc
  device_placement_test.cc
  gemm_request_test.cc
  grpc_status_test.cc
  host_copier_test.cc
  log_test.cc
  metrics_test.cc
  host_memory_test.cc
  launch_runner_test.cc
  response_encoding_test.cc
  payload_placement_test.cc
  tensor_store_test.cc
)
target_link_libraries(server_unit_test PRIVATE gemm_server_lib GTest::gtest_main)
if(GEMM_SANITIZE STREQUAL "thread")  # the TSan suite (tests/sanitizers)
  target_sources(server_unit_test PRIVATE sanitizers/tsan_absl_sync.cc)
  target_link_libraries(server_unit_test PRIVATE ${CMAKE_DL_LIBS})
  add_executable(tsan_canary sanitizers/tsan_canary.cc sanitizers/tsan_absl_sync.cc)
  target_link_libraries(tsan_canary PRIVATE absl::synchronization ${CMAKE_DL_LIBS})
endif()
gtest_discover_tests(server_unit_test DISCOVERY_TIMEOUT 60)

add_executable(server_integration_test server_integration_test.cc
  health_and_reflection_test.cc thread_name_test.cc)
target_link_libraries(server_integration_test PRIVATE gemm_server_lib GTest::gtest_main)
gtest_discover_tests(server_integration_test DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)

# Resident tensors through the generated stub: every error, TTL, deletes under running
# jobs, disconnects, parts, shared-weight batching; on a server of two (CPU) devices:
# placement, header.device, faults; and hostile or careless callers of the store.
add_executable(resident_tensor_server_test resident_tensor_server_test.cc
  multi_device_server_test.cc store_hardening_test.cc raw_http2_client.cc)
target_link_libraries(resident_tensor_server_test PRIVATE gemm_server_lib GTest::gtest_main)
gtest_discover_tests(resident_tensor_server_test DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)

add_executable(client_library_test client_library_test.cc)
target_link_libraries(client_library_test PRIVATE gemm_server_lib gemm_client GTest::gtest_main)
gtest_discover_tests(client_library_test DISCOVERY_TIMEOUT 60)

# Resident tensors through the client library (tensor_store_client.h, the refs of
# gemm_client.h) against a whole server in-process.
add_executable(tensor_store_client_test tensor_store_client_test.cc)
target_link_libraries(tensor_store_client_test PRIVATE gemm_server_lib gemm_client
  GTest::gtest_main)
gtest_discover_tests(tensor_store_client_test DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)

# Striped calls (client/striped_call.h) against a whole server in-process.
add_executable(striped_call_test striped_call_test.cc)
target_link_libraries(striped_call_test PRIVATE gemm_server_lib gemm_client GTest::gtest_main)
gtest_discover_tests(striped_call_test DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)

# Striped calls when the client or the server is killed mid-call (processes).
add_executable(striped_process_test striped_process_test.cc)
target_link_libraries(striped_process_test PRIVATE gemm_client GTest::gtest_main absl::strings
  absl::synchronization absl::time)
target_compile_definitions(striped_process_test PRIVATE
  GEMM_SERVER_BINARY="$<TARGET_FILE:gemm-server>" GEMM_CLI_BINARY="$<TARGET_FILE:gemm-cli>")
add_dependencies(striped_process_test gemm-server gemm-cli)
gtest_discover_tests(striped_process_test DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)

# grpc-floor, the transport benchmarks' yardstick, serves striped calls (a process).
if(TARGET grpc-floor)
  add_executable(grpc_floor_test grpc_floor_test.cc)
  target_link_libraries(grpc_floor_test PRIVATE gemm_client GTest::gtest_main absl::strings
    absl::synchronization absl::time)
  target_compile_definitions(grpc_floor_test PRIVATE GRPC_FLOOR_BINARY="$<TARGET_FILE:grpc-floor>")
  add_dependencies(grpc_floor_test grpc-floor)
  gtest_discover_tests(grpc_floor_test DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 120)
endif()

# gemm-server --unix_socket, called by gemm-cli.
add_executable(unix_socket_test unix_socket_test.cc)
target_link_libraries(unix_socket_test PRIVATE GTest::gtest_main absl::strings
  absl::synchronization absl::time)
target_compile_definitions(unix_socket_test PRIVATE
  GEMM_SERVER_BINARY="$<TARGET_FILE:gemm-server>" GEMM_CLI_BINARY="$<TARGET_FILE:gemm-cli>")
add_dependencies(unix_socket_test gemm-server gemm-cli)
gtest_discover_tests(unix_socket_test DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)

# gemm-cli's resident tensor commands against a gemm-server process.
add_executable(resident_cli_test resident_cli_test.cc)
target_link_libraries(resident_cli_test PRIVATE gemm_kernels GTest::gtest_main absl::strings
  absl::synchronization absl::time)
target_compile_definitions(resident_cli_test PRIVATE
  GEMM_SERVER_BINARY="$<TARGET_FILE:gemm-server>" GEMM_CLI_BINARY="$<TARGET_FILE:gemm-cli>")
add_dependencies(resident_cli_test gemm-server gemm-cli)
gtest_discover_tests(resident_cli_test DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)

add_executable(transport_tools_test transport_tools_test.cc)
target_link_libraries(transport_tools_test PRIVATE gemm_cli_lib GTest::gtest_main)
gtest_discover_tests(transport_tools_test DISCOVERY_TIMEOUT 60)

add_executable(cli_test cli_test.cc)
target_link_libraries(cli_test PRIVATE gemm_cli_lib GTest::gtest_main)
gtest_discover_tests(cli_test DISCOVERY_TIMEOUT 60)

add_executable(quantized_server_test quantized_server_test.cc)
target_link_libraries(quantized_server_test PRIVATE gemm_server_lib GTest::gmock GTest::gtest_main)
gtest_discover_tests(quantized_server_test DISCOVERY_TIMEOUT 60)

# The server against hostile clients, overload and shutdown (raw HTTP/2 where a gRPC
# client cannot misbehave enough).
add_executable(server_robustness_test server_robustness_test.cc raw_http2_client.cc)
target_link_libraries(server_robustness_test PRIVATE gemm_server_lib GTest::gtest_main)
gtest_discover_tests(server_robustness_test DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)

# The binaries as processes: signals, exit status and timing, --version, a taken port.
add_executable(server_process_test server_process_test.cc)
target_link_libraries(server_process_test PRIVATE gemm_server_lib GTest::gtest_main)
target_compile_definitions(server_process_test PRIVATE
  GEMM_SERVER_BINARY="$<TARGET_FILE:gemm-server>" GEMM_CLI_BINARY="$<TARGET_FILE:gemm-cli>"
  GEMM_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_dependencies(server_process_test gemm-server gemm-cli)
gtest_discover_tests(server_process_test DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)

# The hostile callers as a command, for the measurements (bench/cpu_robustness_bench.sh).
add_executable(hostile-client hostile_client_main.cc raw_http2_client.cc)
target_link_libraries(hostile-client PRIVATE gemm_proto gemm_kernels absl::strings absl::time)
target_include_directories(hostile-client PRIVATE ${PROJECT_SOURCE_DIR})

# A Python grpcio client, as users write one (python3-grpcio, python3-numpy,
# python3-protobuf and protoc; dev.sh installs them).
find_program(GEMM_DEBIAN_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(GEMM_DEBIAN_PYTHON)
  add_test(NAME python_client_test
           COMMAND ${GEMM_DEBIAN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python_client_test.py
                   $<TARGET_FILE:gemm-server> ${PROJECT_SOURCE_DIR})
  set_tests_properties(python_client_test PROPERTIES TIMEOUT 120)
  # The READMEs' examples as written: README.md's gemm-cli session (output matched but for
  # numbers) and clients/python/README.md's Python blocks, against a default server.
  add_test(NAME readme_examples_test
           COMMAND ${GEMM_DEBIAN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/readme_examples_test.py
                   $<TARGET_FILE:gemm-server> $<TARGET_FILE:gemm-cli> ${PROJECT_SOURCE_DIR}
                   ${CMAKE_CURRENT_BINARY_DIR}/readme_stubs)
  set_tests_properties(readme_examples_test PROPERTIES TIMEOUT 300)
endif()

# bench/soak.sh for 60 s (the record run is 10 minutes): mixed load with deadlines,
# cancellations and malformed calls against a gemm-server process; RSS, descriptors,
# threads and calls in flight checked at the end. Alone, so its load slows no other test.
add_test(NAME soak_60s
         COMMAND bash ${PROJECT_SOURCE_DIR}/bench/soak.sh ${CMAKE_BINARY_DIR} 60)
set_tests_properties(soak_60s PROPERTIES TIMEOUT 300 RUN_SERIAL TRUE LABELS soak)

# bench/multi_device_bench.sh on a server of two CPU devices, briefly: the script the
# GPU session runs on two GPUs keeps working, and its checks hold (work spread over both
# devices, a weight's callers on its device only, operands on two devices refused).
add_test(NAME multi_device_bench_cpu
         COMMAND ${CMAKE_COMMAND} -E env DURATION_S=1 WARMUP_S=0.2
                 OUT_DIR=${CMAKE_CURRENT_BINARY_DIR}/multi_device_bench
                 bash ${PROJECT_SOURCE_DIR}/bench/multi_device_bench.sh ${CMAKE_BINARY_DIR} cpu)
set_tests_properties(multi_device_bench_cpu PROPERTIES TIMEOUT 300 RUN_SERIAL TRUE
                     LABELS bench)

add_executable(region_table_test region_table_test.cc)
target_link_libraries(region_table_test PRIVATE gemm_regions GTest::gtest_main)
gtest_discover_tests(region_table_test DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 120)

add_executable(matmul_stream_test matmul_stream_test.cc)
target_link_libraries(matmul_stream_test PRIVATE gemm_server_lib gemm_client GTest::gtest_main)
gtest_discover_tests(matmul_stream_test DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)

add_executable(shm_server_test shm_server_test.cc)
target_link_libraries(shm_server_test PRIVATE gemm_server_lib gemm_client GTest::gtest_main)
gtest_discover_tests(shm_server_test DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)

add_executable(part_workers_test part_workers_test.cc)
target_link_libraries(part_workers_test PRIVATE gemm_client GTest::gtest_main)
gtest_discover_tests(part_workers_test DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 120)

# libgemmd_blas.so (client/blas) under unmodified programs: the reference BLAS testers
# (libblas-test), numpy and a threaded caller, against gemm-server processes. Not in a
# sanitizer build: an instrumented library preloaded into uninstrumented programs finds
# no sanitizer runtime there.
if(GEMM_DEBIAN_PYTHON AND GEMM_SANITIZE STREQUAL "")
  add_executable(blas_threads_check blas/blas_threads_check.cc)
  target_link_libraries(blas_threads_check PRIVATE gemmd_blas Threads::Threads)
  add_test(NAME blas_library_test
           COMMAND ${GEMM_DEBIAN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/blas/blas_library_test.py
                   --server $<TARGET_FILE:gemm-server> --library $<TARGET_FILE:gemmd_blas>
                   --alternative $<TARGET_FILE:gemmd_blas_alternative>
                   --threads_check $<TARGET_FILE:blas_threads_check>)
  set_tests_properties(blas_library_test PROPERTIES TIMEOUT 600)
endif()
add_executable(blas_unit_test blas/blas_unit_test.cc)
target_link_libraries(blas_unit_test PRIVATE gemmd_blas_core GTest::gtest_main)
gtest_discover_tests(blas_unit_test DISCOVERY_TIMEOUT 60)
