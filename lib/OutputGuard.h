//===- lib/OutputGuard.h - No output onto what a command reads -*- C++ -*-===//
//
// Every command that writes files checks all of its outputs here, once,
// before it starts any work. The command first tells the guard what it
// reads or keeps (the manifest, the stage files, the model the manifest
// names, inputs, training data, user metadata, meta caches), then claims
// each output it will write (--output, --trace, --save, --save-grads,
// --dot, --csv, -o). A claim is refused, as one line naming the option and
// the path, when writing it would replace or delete something kept, when it
// collides with another output of the same command, when the path is empty,
// or when its directory does not exist. Paths are compared by what they
// name on disk: the same inode (hard and symbolic links), or the same name
// in the same real directory (a file not written yet).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_OUTPUTGUARD_H
#define PPC_LIB_OUTPUTGUARD_H

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <string>
#include <vector>

namespace ppc {

class OutputGuard {
public:
  /// `path` (a file or a directory) is read or kept by the command; `what`
  /// names it in refusals ("the manifest", "the file of stage 2"). An empty
  /// path is ignored; a path that does not exist is kept by its name.
  void keep(llvm::StringRef path, const llvm::Twine &what);
  /// Every file directly inside `dir` whose name `matches` accepts is kept
  /// (meta caches, a directory input's batch files), without listing `dir`.
  void keepMatching(llvm::StringRef dir,
                    std::function<bool(llvm::StringRef)> matches,
                    const llvm::Twine &what);

  /// Claims `path`, the file `option` writes (replacing it atomically).
  /// Errors, each one line starting with the option and the path:
  ///   "--trace '' names no file"
  ///   "--trace 'd' is a directory"
  ///   "cannot write 'f': it exists and is not a regular file" (a FIFO, a
  ///    device: checkOutputFile() in lib/FileUtil.h)
  ///   "--trace 'x/t.json': directory 'x' does not exist"
  ///   "--trace 's/manifest.json' is the manifest; refusing to overwrite it"
  ///   "--trace 'o.pt' is also --output; give each output its own path"
  ///   "--trace 'out/t.json' is inside --save 'out', which the save
  ///    replaces; give each output its own path"
  llvm::Error claimFile(llvm::StringRef option, llvm::StringRef path);
  /// Claims `path`, a directory `option` creates (with its parents) or
  /// replaces whole, or writes files into. Errors as claimFile's, and:
  ///   "--save 'd' exists and is not a directory"
  ///   "--save 'out' holds the manifest ('out/manifest.json'); refusing to
  ///    overwrite it"
  ///   "--output 'in' is the input directory; refusing to overwrite it"
  llvm::Error claimDirectory(llvm::StringRef option, llvm::StringRef path);
  /// Claims `path` as claimDirectory() does, for a directory the command
  /// replaces whole (split -o, train --save): an existing non-empty one must
  /// also be an earlier ppc output (checkEarlierOutput, `option` naming it
  /// in its messages).
  llvm::Error claimReplacedDirectory(llvm::StringRef option,
                                     llvm::StringRef path);

private:
  /// Where a path is on disk: `location` is its real directory joined with
  /// its file name (set for any path whose directory exists, else the
  /// absolute path as given); `real` its real path, and `device`/`inode`
  /// its identity, when it exists.
  struct Place {
    std::string location, real;
    uint64_t device = 0, inode = 0;
    bool exists = false;
    bool isDirectory = false;
  };
  struct Kept {
    Place place;
    std::string what, path;
    /// keepMatching's: files inside place (a directory) named so.
    std::function<bool(llvm::StringRef)> matches;
  };
  struct Claim {
    Place place;
    std::string option, path;
    bool isDirectory;
  };

  static Place placeOf(llvm::StringRef path);
  /// Whether `p` names the file `k` (one of keep()'s, or a file keepMatching
  /// covers).
  static bool names(const Place &p, const Kept &k);
  llvm::Error checkNotClaimed(const Place &p, llvm::StringRef option,
                              llvm::StringRef path, bool isDirectory) const;

  std::vector<Kept> kept_;
  std::vector<Claim> claims_;
};

/// Keeps what a command that reads the manifest at `manifestPath` must not
/// overwrite: the manifest, each stage file, the model it was split from
/// (its source path, when that exists), and the meta cache files in
/// `metaCacheDir` (the manifest's directory when empty). A manifest that
/// does not load keeps only itself: the command reports why it is bad.
void keepManifestFiles(OutputGuard &guard, llvm::StringRef manifestPath,
                       llvm::StringRef metaCacheDir = "");

/// Whether `name` is a meta cache file ppc run writes beside a manifest
/// (meta_cache.rank<R>of<W>.json, docs/runtime.md).
bool isMetaCacheFileName(llvm::StringRef name);

/// Succeeds only if the non-empty directory `dir` is provably an earlier
/// output of ppc split or ppc train --save holding nothing else: a
/// manifest.json that loads as a ppc manifest, and besides it only regular
/// files the manifest names as stage files and meta caches. Anything else
/// is the user's and must not be deleted by replacing `dir`. `option` opens
/// each message ("output directory 'out' holds 'notes.txt', which is not
/// part of the earlier ppc output there; refusing to replace it").
llvm::Error checkEarlierOutput(llvm::StringRef dir,
                               llvm::StringRef what = "output directory");

} // namespace ppc

#endif // PPC_LIB_OUTPUTGUARD_H
