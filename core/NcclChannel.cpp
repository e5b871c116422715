#include "core/NcclChannel.h"

#include "core/CommActivity.h"
#include "core/Error.h"

namespace sluice {

std::string during() {
  const std::string a = CommActivity::current();
  return a.empty() ? "" : " (" + a + ")";
}

void ncclCheck(ncclResult_t rc, ncclComm_t comm, const std::string& op, int rank) {
  if (rc == ncclSuccess) return;
  const char* last = comm ? ncclGetLastError(comm) : nullptr;
  throw CommError("NCCL " + op + " failed on rank " + std::to_string(rank) + during() + ": " +
                  ncclGetErrorString(rc) + (last && *last ? std::string(" (") + last + ")" : std::string()));
}

void cudaCheck(cudaError_t rc, const std::string& op) {
  if (rc == cudaSuccess) return;
  throw CommError("CUDA " + op + " failed: " + cudaGetErrorString(rc));
}

ncclDataType_t ncclType(c10::ScalarType dtype, const char* op) {
  switch (dtype) {
    case c10::kFloat: return ncclFloat32;
    case c10::kDouble: return ncclFloat64;
    case c10::kHalf: return ncclFloat16;
    case c10::kBFloat16: return ncclBfloat16;
    case c10::kInt: return ncclInt32;
    case c10::kLong: return ncclInt64;
    default:
      throw CommError(std::string(op) + ": dtype " + c10::toString(dtype) +
                      " is not supported for reductions over NCCL (float, double, half, bfloat16, int32, int64)");
  }
}

ncclRedOp_t ncclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Average: return ncclSum;  // then a division: the same arithmetic as MPI
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  return ncclSum;
}

}  // namespace sluice
