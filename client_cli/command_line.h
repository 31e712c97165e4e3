// gemm-cli's commands and the flags each takes, and a reading of the command line that
// says which flags it names: a flag that does not apply to the command is an error, and
// `gemm-cli <command> --help` lists that command's flags only.
#ifndef GEMMD_CLIENT_CLI_COMMAND_LINE_H_
#define GEMMD_CLIENT_CLI_COMMAND_LINE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client_cli/cli_options.h"

namespace gemmd {

struct CommandSpec {
  absl::string_view name;
  absl::string_view summary;             // a paragraph for --help
  std::vector<absl::string_view> flags;  // besides kCommonFlags
  int (*run)(const CliOptions& options);  // commands.h; returns the exit status
  // The one operand it takes after its name, as --help shows it ("FILE.npy"); empty:
  // none.
  absl::string_view operand = {};
};

// Every command takes these.
inline constexpr absl::string_view kCommonFlags[] = {
    "target",        "timeout_s",     "tls",             "tls_ca_file",
    "tls_cert_file", "tls_key_file",  "tls_server_name", "token_file"};

const std::vector<CommandSpec>& Commands();
// nullptr for an unknown name.
const CommandSpec* FindCommand(absl::string_view name);

// What the command line names, read the way absl's parser reads it: a token starting
// with '-' is a flag (one or two dashes, value after '=' or, for a non-bool flag, in the
// next token; --nofoo is the bool foo); "--" ends the flags; the first other token is the
// command.
struct CommandLine {
  std::string command;             // "" when none is given
  std::vector<std::string> flags;  // names as registered (no dashes, no "no" prefix)
  bool help = false;               // --help, --helpfull, --helpshort, ... anywhere
};
CommandLine ReadCommandLine(const std::vector<std::string>& args);  // args[0]: program

// OK when every flag named applies to `command`; else INVALID_ARGUMENT naming the first
// that does not, the command and the flags it takes.
absl::Status CheckFlagsApply(const CommandLine& line, const CommandSpec& command);

// OK when `operands` (the words after the command's name) are what it takes; else
// INVALID_ARGUMENT with its usage.
absl::Status CheckOperands(const std::vector<std::string>& operands, const CommandSpec& command);

// `gemm-cli <command> --help`: what it does and its flags with their defaults;
// HelpText(nullptr): the commands.
std::string HelpText(const CommandSpec* command);

}  // namespace gemmd

#endif  // GEMMD_CLIENT_CLI_COMMAND_LINE_H_
