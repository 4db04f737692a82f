// dist/nccl_missing.cpp - the NCCL transport's entry points in builds without
// NCCL (spattn/dist_transport.hpp): they say so.
#include "spattn/dist_transport.hpp"
#include "spattn/error.hpp"

namespace spattn::dist {

namespace {
[[noreturn]] void missing() {
  fail("the NCCL transport is not in this build of spattn: configure with CUDA and NCCL found "
       "(-DSPATTN_NCCL=ON; -DNCCL_ROOT=<dir with include/nccl.h and lib/libnccl.so*>)");
}
}  // namespace

bool nccl_available() { return false; }
std::unique_ptr<Transport> nccl_transport(void*) { missing(); }
std::unique_ptr<Transport> nccl_transport_from_env() { missing(); }

}  // namespace spattn::dist
