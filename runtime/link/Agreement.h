//===- runtime/link/Agreement.h - What the ranks must share ---*- C++ -*-===//
//
// The start-up agreement of a job: every rank brings a record of what must
// be the same on all ranks (the options that shape the computation and the
// digests of the files it reads), the rendezvous exchanges the records
// through its store once every rank has announced itself (meetRanks(),
// runtime/link/Rendezvous.cpp), and each rank compares them the same way,
// so that ranks started differently all fail at once with the same line:
//   ranks disagree on --lr: rank 0 has 0.01, rank 2 has 0.5
// instead of training on silently or waiting for a peer until the timeout.
//
// Who fills the record (each adds what only it can see, and the first to
// record a name wins). The runtime names its entries by optionName()
// (lib/OptionName.h); below, as ppc's CLI names them:
//   - the commands (tools/ppc/*Command.cpp): `ppc train` the digests of
//     --data and --eval-data, --steps, --eval-every, --checkpoint-dir (given
//     or not), --checkpoint-every, --resume and --save (given or not);
//     `ppc run` --input's digest (a directory: over its files), --repeat;
//     `ppc generate` --prompt's digest, --microbatches, --max-new-tokens,
//     --temperature, --top-k, --top-p, --seed, --eos-id, --token-input,
//     --position-input;
//   - Trainer::create (runtime/train/Trainer.cpp), for library users too:
//     --loss, --loss-output, --optimizer, --lr, --momentum, --weight-decay
//     (after the optimizer's default), --clip-grad-norm, --lr-schedule,
//     --warmup-steps, --min-lr, --schedule auto and --max-activations,
//     --schedule-csv's digest, --data-parallel, --recompute, --seed, and
//     with replicas PPC_OVERLAP_ALLREDUCE (runtime/link/LaunchEnv.h);
//   - RankContext (runtime/exec/RankContext.cpp), for every job:
//     --microbatches, --schedule, --precision, --device, --link,
//     --data-parallel, --stream-window, --input-meta's digest, the
//     manifest's SHA-256 (which names every stage file's), and what shapes
//     the messages: the wire format's version and PPC_COALESCE.
// Per-rank outputs and settings need not agree: --log-file, --stats-json,
// --trace, --save-grads, --stats, --quiet, --progress, --threads,
// --timeout, --meta-cache (the meta cache's use is agreed on by its own
// collective), --keep (rank 0 prunes), --output (the output rank writes).
//
// A file's digest is xxHash64 of its bytes with its size (a 100 MB file,
// mapped and hashed: 0.02 s with a warm page cache here, up to 0.6 s on a
// busy machine; a cold read adds the disk's time). A rank that
// cannot read a data file it was named (it may not need it: ranks that hold
// no input stage and no loss never open --data) records it as unknown, and
// unknown entries are not compared.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_LINK_AGREEMENT_H
#define PPC_RUNTIME_LINK_AGREEMENT_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace c10d {
class Store;
}

namespace ppc {

/// One thing every rank must have alike.
struct AgreementEntry {
  /// What it is, as the error names it: an option (optionName(),
  /// lib/OptionName.h: "lr", or ppc's flag) or a file ("the manifest").
  std::string name;
  /// What is compared.
  std::string value;
  /// What the error shows for this rank ("0.01", "none", "data.pt (xxh64
  /// 0123456789abcdef, 4096 bytes)").
  std::string shown;
  /// False where this rank could not tell (a data file it cannot read):
  /// not compared.
  bool known = true;
};

/// A rank's record: entries in a fixed order, each name once.
class Agreement {
public:
  /// Adds `name` with `value`, shown as `shown` (empty: as `value`);
  /// replaces an entry of that name, keeping its place.
  void set(llvm::StringRef name, llvm::StringRef value,
           llvm::StringRef shown = "");
  /// Adds `name` with `value` unless the record has it already (the
  /// runtime's defaults for what a caller did not record itself).
  void setDefault(llvm::StringRef name, llvm::StringRef value);
  /// A flag whose value need not match but whose presence must: shown as
  /// `shown`, or "none" when not given.
  void setPresence(llvm::StringRef name, std::optional<std::string> shown);
  /// A number as a user would write it: the shortest text that reads back
  /// as `value` ("0.01", "1e-05", "inf").
  void setNumber(llvm::StringRef name, double value);
  /// The digest of the file at `path` (xxh64 and size; of a directory,
  /// over its files' names and digests), shown with the path; "none" when
  /// `path` is empty; unknown when it cannot be read or is not a regular
  /// file (a FIFO or a device is never opened here).
  void setFileDigest(llvm::StringRef name, llvm::StringRef path);
  /// The digest of `bytes` already read (shown with `path`).
  void setBytesDigest(llvm::StringRef name, llvm::StringRef path,
                      llvm::StringRef bytes);

  bool has(llvm::StringRef name) const;
  const std::vector<AgreementEntry> &entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }

  /// The record as bytes for the store.
  std::string encode() const;
  /// A record from bytes of another rank (untrusted). Errors: "malformed
  /// start-up record (WHY)".
  static llvm::Expected<Agreement> decode(llvm::StringRef bytes);

  /// The most bytes an encoded record may have, and the most entries.
  static constexpr size_t kMaxBytes = 1 << 20;
  static constexpr size_t kMaxEntries = 4096;

private:
  AgreementEntry &slot(llvm::StringRef name);
  /// setFileDigest() of a directory: its files' names, digests and sizes.
  void setDirectoryDigest(llvm::StringRef name, llvm::StringRef path);
  std::vector<AgreementEntry> entries_;
};

/// The first difference between the records of ranks 0..N-1 (`records[r]`
/// is rank r's): rank 0's against rank 1's, then rank 2's, ...; within a
/// pair, the first entry of rank 0's order that differs (then those only
/// rank r has). "ranks disagree on --lr: rank 0 has 0.01, rank 2 has 0.5",
/// or empty when they agree. Every byte from a record is printable().
std::string firstDisagreement(const std::vector<Agreement> &records);

/// Exchanges `mine` (rank `rank`'s record) with the other ranks of a job of
/// `worldSize` through `store` (key "ppc/agree/R" per rank) and compares
/// them; every rank gets the same answer. Waits at most `timeout` for the
/// others' records. Errors: firstDisagreement()'s line; "ranks disagree:
/// rank R sent a malformed start-up record (WHY)"; "lost rank R (sent no
/// start-up record within T s)"; "this rank's start-up record (rendezvous
/// key 'ppc/agree/R') was deleted from the store: another process is
/// writing into this job's store" (a rank never blames itself for its own
/// record gone); the store's failures as thrown (c10::Error).
llvm::Error agreeAcrossRanks(c10d::Store &store, int rank, int worldSize,
                             const Agreement &mine,
                             std::chrono::milliseconds timeout);

} // namespace ppc

#endif // PPC_RUNTIME_LINK_AGREEMENT_H
