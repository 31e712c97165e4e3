// Everything gemm-cli's commands take, filled from flags by gemm_cli.cc.
#ifndef GEMMD_CLIENT_CLI_CLI_OPTIONS_H_
#define GEMMD_CLIENT_CLI_CLI_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "client/gemm_client.h"

namespace gemmd {

struct CliOptions {
  std::string target = "127.0.0.1:50051";
  // TLS and the bearer token: as named (--tls_*, --token_file, GEMMD_TOKEN), then loaded.
  ChannelSecurityFiles security_files;
  ChannelSecurity security;
  double timeout_s = 60;
  // The command's operands after its name (put FILE.npy, get HANDLE, rm HANDLE).
  std::vector<std::string> args;
  // Problem (random operands unless a/b name .npy files, or resident tensors as @HANDLE).
  int64_t m = 512, n = 512, k = 512, batch = 0;  // batch 0 = rank-2 operands
  std::string dtype = "float32";                 // of random operands
  std::string a_path, b_path, c_path, out_path;
  std::string precision = "auto";
  std::string output_dtype;  // empty: float32, or float64 for FP64
  bool transpose_a = false, transpose_b = false;
  double alpha = 1.0, beta = 0.0;
  std::string kernel;
  uint64_t seed = 1;
  bool verify = false;
  // quantized
  std::string quant_format = "nvfp4";  // int8 | nvfp4
  bool format_set = false;             // --format was named (put: quantize the tensor)
  bool weight_only = false;            // quantize B only; A goes as --dtype
  // Resident tensors: put's ttl and label (also matmul --keep_c's), put's connections
  // and device.
  int64_t ttl_s = 0;
  std::string label;
  int connections = 0;  // 0 = automatic
  std::string device;   // put: where the tensor lives ("" = the server's choice)
  bool keep_c = false;      // matmul: C stays on the server; print its handle
  int stripes = 0;          // matmul, quantized, bench: CallOptions::stripes
  int chunk_kib = 0;        // put, matmul, quantized, bench: KiB per TensorChunk (0 = default)
  int row_blocks = 0;       // matmul, bench: CallOptions::row_blocks
  bool shm = false;         // matmul, quantized, bench: operands and C in a region
  std::string shm_key;      // its POSIX name; empty = "/" + the server's prefix + "cli-PID"
  bool resident_b = false;  // bench: upload B once, send A alone
  // bench
  int concurrency = 1;
  int channels = 1;
  double duration_s = 10;
  double warmup_s = 2;
  bool local = false;  // time the in-process CPU backend instead of the server
  bool async = false;  // bench: callback API, no thread per call in flight
  bool stream = false;   // bench: requests on MatmulStreams (--concurrency of them)
  int outstanding = 64;  // bench --stream: requests in flight per stream
  bool quantized = false;  // bench: drive QuantizedMatmul (--format, --weight_only)
  double rate = 0;         // bench: open loop at this many requests/s (0 = closed loop)
  std::string arrivals = "poisson";  // bench --rate: poisson | fixed
  int server_pid = 0;      // bench: report this process's CPU per request (same host)
  std::string grpc_args;   // bench: extra gRPC channel arguments, name=value,...
  bool json = false;

  // The server to call, with the security to call it with.
  Endpoint server() const { return Endpoint(target, security); }
  // --chunk_kib in bytes (0 = the default): PutOptions::chunk_bytes,
  // CallOptions::stripe_chunk_bytes.
  int64_t chunk_bytes() const { return int64_t{chunk_kib} << 10; }
};

}  // namespace gemmd

#endif  // GEMMD_CLIENT_CLI_CLI_OPTIONS_H_
