// data::TokenFile: a pre-tokenized corpus, a flat binary file of token ids
// (data.name: tokens), as nanoGPT's and llm.c's data preparation write them.
//
// Format: little-endian uint16 ids (vocabularies up to 65,536) or uint32
// (data.token_dtype), back to back; or llm.c's layout: a header of 256 int32
// (magic 20240520, version 1 = uint16 / 2 = uint32, the token count) and
// then the ids. scripts/tokenize.py writes the latter. The file is read,
// never copied whole: each batch reads its windows with pread() from the
// descriptor opened at load (not a memory mapping, so a file truncated
// underneath cannot kill the rank with SIGBUS).
//
// A file that changes while the job reads it (truncated, rewritten in place,
// appended to: its size or modification time differs from the load's) ends
// the job with a DataError naming the file and what changed, at the next
// batch; a file replaced by a rename is not seen (the open descriptor keeps
// reading the file that was loaded).
//
// Samples: window k is tokens [k T, k T + T + 1) (T = block size; input the
// first T, target the last T), so windows = (tokens - 1) / T and none
// overlaps another's inputs. Training order: global sample g = step * size
// + i walks epochs of the windows, each a permutation from a CPU generator
// seeded with seed * 1000003 + 2000000 + epoch: a batch is a pure function of
// (seed, step), and the trainer gives each data-parallel rank its own rows
// (a disjoint shard, the same samples whatever the layout). slice(b, e):
// windows b..e-1 in file order (evaluation on a second file, data.eval_path).
//
// Errors (DataError, naming the file and what to fix): missing or empty
// file, a size that is not a whole number of ids, a header whose magic,
// version or count does not match the file or data.token_dtype, fewer
// tokens than one window, a token id >= the model's vocabulary (checked over
// the whole file at load), and a headerless file of uint32 ids read as
// uint16 (every id at an odd position 0: the ids' high halves; over 1,024 ids
// or more).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/Files.h"
#include "data/Dataset.h"

namespace sluice::data {

class TokenFile : public Dataset {
 public:
  // dtype: uint16 | uint32 (what a headerless file holds; a header must agree).
  TokenFile(const std::string& path, const std::string& dtype, int64_t blockSize, int64_t vocabSize, int64_t seed);
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  Batch batch(int64_t step, int64_t size) const override;
  std::string describe() const override;
  Batch slice(int64_t begin, int64_t end) const;
  int64_t windows() const { return windows_; }
  int64_t tokens() const { return count_; }

  static constexpr int32_t kHeaderMagic = 20240520;  // llm.c's
  static constexpr int64_t kHeaderInts = 256;

 private:
  // Reads `bytes` at `offset` of the file (DataError on a short read: the file shrank).
  void readAt(int64_t offset, int64_t bytes, uint8_t* out) const;
  // Sets offset_, width_, count_ and header_ from llm.c's header or the file's size (DataError when they disagree).
  void readLayout(const std::string& dtype, int64_t bytes);
  // DataError when the file's size or modification time is no longer the load's.
  void checkUnchanged() const;
  int64_t idAt(const uint8_t* p) const;  // one id (unaligned little-endian read)
  std::pair<int64_t, bool> largestId(const struct stat& st) const;  // largest id, odd ids all 0
  Batch windowsAt(const std::vector<int64_t>& index) const;
  std::string path_;
  UniqueFd fd_;       // open for the object's life (pread)
  struct stat stat_ {};  // at load
  int64_t offset_ = 0;  // the first id's byte (after a header)
  int64_t width_ = 2, count_ = 0;  // bytes per id, ids
  bool header_ = false;
  int64_t blockSize_, seed_, windows_ = 0, maxId_ = 0;
  // The last epoch's order (batch() is called from one thread: the trainer's).
  mutable int64_t permEpoch_ = -1;
  mutable torch::Tensor perm_;
};

}  // namespace sluice::data
