# The Python client package (clients/python/gemmd): its stubs generated into this build
# directory (clients/python/generate.sh), then its unittest suite against gemm-server
# processes of its own on the CPU backend, including two behind one ipv4: target
# (clients/python/tests/test_client.py). gemm-cli is there to check that the Python
# quantizers write the same bytes as the C++ client. Needs python3-grpcio, python3-numpy,
# python3-protobuf, protobuf-compiler and protobuf-compiler-grpc (dev.sh installs them).
if(GEMM_DEBIAN_PYTHON)
  add_test(NAME python_client_package_test
           COMMAND ${GEMM_DEBIAN_PYTHON} ${PROJECT_SOURCE_DIR}/clients/python/tests/test_client.py
                   --server $<TARGET_FILE:gemm-server> --cli $<TARGET_FILE:gemm-cli>
                   --stubs ${CMAKE_CURRENT_BINARY_DIR}/python_stubs --generate)
  set_tests_properties(python_client_package_test PROPERTIES TIMEOUT 180 LABELS deploy)
  # The same suite against the package as pip installs it (a wheel with its stubs inside,
  # in a fresh virtual environment; needs python3-venv, python3-pip, python3-setuptools,
  # python3-wheel).
  add_test(NAME python_client_install_test
           COMMAND bash ${PROJECT_SOURCE_DIR}/clients/python/tests/install_test.sh
                   ${GEMM_DEBIAN_PYTHON} $<TARGET_FILE:gemm-server> $<TARGET_FILE:gemm-cli>)
  set_tests_properties(python_client_install_test PROPERTIES TIMEOUT 240 LABELS deploy)
endif()
