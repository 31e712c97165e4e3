#include "server/port_probe.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gemmd {

std::string WhyCannotListen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
      rc != 0) {
    return absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc));
  }
  std::string why = "no address to listen on";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    const bool ok = bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 1) == 0;
    if (!ok) why = std::strerror(errno);
    close(fd);
    if (ok) {
      why.clear();
      break;
    }
  }
  freeaddrinfo(found);
  return why;
}

std::string WhyCannotListenUnix(const std::string& path) {
  sockaddr_un address{};
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::StrCat("a Unix socket path is 1 to ", sizeof(address.sun_path) - 1,
                        " bytes; this one is ", path.size());
  }
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : path.substr(0, std::max<size_t>(slash, 1));
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::StrCat("the directory ", dir, " does not exist");
  }
  if (lstat(path.c_str(), &st) != 0) return "";  // nothing there yet
  if (!S_ISSOCK(st.st_mode)) return absl::StrCat(path, " exists and is not a socket");
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return std::strerror(errno);
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size());
  const bool answered = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return answered ? absl::StrCat("a server is listening on ", path, " already") : "";
}

}  // namespace gemmd
