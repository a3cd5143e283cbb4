//===- lib/OutputGuard.cpp - No output onto what a command reads ----------===//
//
// This file implements OutputGuard (see OutputGuard.h), the manifest's kept
// files, and the rule for replacing an earlier output directory.
//
//===----------------------------------------------------------------------===//
#include "lib/OutputGuard.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/Manifest.h"
#include "lib/Stage.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <set>

namespace ppc {

namespace fs = llvm::sys::fs;
namespace path = llvm::sys::path;

OutputGuard::Place OutputGuard::placeOf(llvm::StringRef given) {
  Place place;
  llvm::SmallString<256> abs(given);
  fs::make_absolute(abs);
  path::remove_dots(abs, /*remove_dot_dot=*/false);
  llvm::SmallString<256> realDir;
  if (!fs::real_path(path::parent_path(abs), realDir)) {
    path::append(realDir, path::filename(abs));
    place.location = std::string(realDir);
  } else {
    place.location = std::string(abs);
  }
  fs::file_status status;
  if (fs::status(given, status, /*follow=*/true))
    return place;
  place.exists = true;
  place.isDirectory = fs::is_directory(status);
  place.device = status.getUniqueID().getDevice();
  place.inode = status.getUniqueID().getFile();
  llvm::SmallString<256> real;
  if (!fs::real_path(given, real))
    place.real = std::string(real);
  return place;
}

/// Whether `path` is `dir` or lies below it (both absolute, normalized).
static bool within(llvm::StringRef path, llvm::StringRef dir) {
  if (path.empty() || dir.empty())
    return false;
  if (path == dir)
    return true;
  return path.startswith(dir) &&
         (dir.endswith("/") || path.drop_front(dir.size()).startswith("/"));
}

bool OutputGuard::names(const Place &p, const Kept &k) {
  if (k.matches) {
    for (llvm::StringRef candidate :
         {llvm::StringRef(p.location), llvm::StringRef(p.real)}) {
      if (candidate.empty())
        continue;
      llvm::StringRef dir = path::parent_path(candidate);
      if ((dir == k.place.location || dir == k.place.real) &&
          k.matches(path::filename(candidate)))
        return true;
    }
    return false;
  }
  if (p.exists && k.place.exists && p.device == k.place.device &&
      p.inode == k.place.inode)
    return true;
  for (llvm::StringRef mine :
       {llvm::StringRef(p.location), llvm::StringRef(p.real)})
    if (!mine.empty() && (mine == k.place.location || mine == k.place.real))
      return true;
  return false;
}

void OutputGuard::keep(llvm::StringRef path, const llvm::Twine &what) {
  if (path.empty())
    return;
  kept_.push_back({placeOf(path), what.str(), path.str(), nullptr});
}

void OutputGuard::keepMatching(llvm::StringRef dir,
                               std::function<bool(llvm::StringRef)> matches,
                               const llvm::Twine &what) {
  if (dir.empty())
    return;
  kept_.push_back({placeOf(dir), what.str(), dir.str(), std::move(matches)});
}

llvm::Error OutputGuard::checkNotClaimed(const Place &p, llvm::StringRef option,
                                         llvm::StringRef given,
                                         bool isDirectory) const {
  llvm::StringRef mine =
      p.real.empty() ? llvm::StringRef(p.location) : llvm::StringRef(p.real);
  for (const Claim &c : claims_) {
    llvm::StringRef theirs = c.place.real.empty()
                                 ? llvm::StringRef(c.place.location)
                                 : llvm::StringRef(c.place.real);
    bool same = mine == theirs ||
                (p.exists && c.place.exists && p.device == c.place.device &&
                 p.inode == c.place.inode);
    if (same)
      return makeError(option + " '" + given + "' is also " + c.option +
                       "; give each output its own path");
    if (c.isDirectory && within(mine, theirs))
      return makeError(option + " '" + given + "' is inside " + c.option +
                       " '" + c.path + "'; give each output its own path");
    if (isDirectory && within(theirs, mine))
      return makeError(option + " '" + given + "' holds " + c.option + " '" +
                       c.path + "'; give each output its own path");
  }
  return llvm::Error::success();
}

llvm::Error OutputGuard::claimFile(llvm::StringRef option,
                                   llvm::StringRef given) {
  if (given.empty())
    return makeError(option + " '' names no file");
  Place p = placeOf(given);
  if (p.isDirectory)
    return makeError(option + " '" + given + "' is a directory");
  if (llvm::Error err = checkOutputFile(given))
    return err;
  llvm::StringRef parent = path::parent_path(given);
  if (!parent.empty() && !fs::is_directory(parent))
    return makeError(option + " '" + given + "': directory '" + parent +
                     "' does not exist");
  for (const Kept &k : kept_)
    if (names(p, k))
      return makeError(option + " '" + given + "' is " + k.what +
                       "; refusing to overwrite it");
  if (llvm::Error err = checkNotClaimed(p, option, given, false))
    return err;
  claims_.push_back({std::move(p), option.str(), given.str(), false});
  return llvm::Error::success();
}

llvm::Error OutputGuard::claimDirectory(llvm::StringRef option,
                                        llvm::StringRef given) {
  if (given.empty())
    return makeError(option + " '' names no directory");
  Place p = placeOf(given);
  if (p.exists && !p.isDirectory)
    return makeError(option + " '" + given + "' exists and is not a directory");
  llvm::StringRef mine =
      p.real.empty() ? llvm::StringRef(p.location) : llvm::StringRef(p.real);
  for (const Kept &k : kept_) {
    for (llvm::StringRef theirs :
         {llvm::StringRef(k.place.real), llvm::StringRef(k.place.location)}) {
      if (theirs == mine)
        return makeError(option + " '" + given + "' is " + k.what +
                         "; refusing to overwrite it");
      if (within(theirs, mine))
        return makeError(option + " '" + given + "' holds " + k.what + " ('" +
                         k.path + "'); refusing to overwrite it");
    }
  }
  if (llvm::Error err = checkNotClaimed(p, option, given, true))
    return err;
  claims_.push_back({std::move(p), option.str(), given.str(), true});
  return llvm::Error::success();
}

llvm::Error OutputGuard::claimReplacedDirectory(llvm::StringRef option,
                                                llvm::StringRef given) {
  if (llvm::Error err = claimDirectory(option, given))
    return err;
  auto nonEmpty = isNonEmptyDirectory(given);
  if (!nonEmpty)
    return nonEmpty.takeError();
  return *nonEmpty ? checkEarlierOutput(given, option) : llvm::Error::success();
}

bool isMetaCacheFileName(llvm::StringRef name) {
  if (!name.consume_front("meta_cache.rank") || !name.consume_back(".json"))
    return false;
  auto [rank, world] = name.split("of");
  auto digits = [](llvm::StringRef s) {
    return !s.empty() && llvm::all_of(s, llvm::isDigit);
  };
  return digits(rank) && digits(world);
}

void keepManifestFiles(OutputGuard &guard, llvm::StringRef manifestPath,
                       llvm::StringRef metaCacheDir) {
  guard.keep(manifestPath, "the manifest");
  std::string dir = manifestDirectory(manifestPath);
  guard.keepMatching(metaCacheDir.empty() ? llvm::StringRef(dir) : metaCacheDir,
                     isMetaCacheFileName, "a meta cache file");
  auto manifest = Manifest::load(manifestPath);
  if (!manifest) {
    llvm::consumeError(manifest.takeError());
    return;
  }
  for (const StageInfo &stage : manifest->stages) {
    llvm::SmallString<256> file(dir);
    path::append(file, stage.file);
    guard.keep(file, llvm::formatv("the file of stage {0}", stage.index));
  }
  llvm::StringRef source = manifest->sourcePath;
  if (source.empty())
    return;
  // As ppc join looks for it: as written, then from the manifest's
  // directory when relative.
  guard.keep(source, "the model the manifest was split from");
  if (!path::is_absolute(source)) {
    llvm::SmallString<256> beside(dir);
    path::append(beside, source);
    guard.keep(beside, "the model the manifest was split from");
  }
}

llvm::Error checkEarlierOutput(llvm::StringRef dir, llvm::StringRef what) {
  auto refuse = [&](const llvm::Twine &why) {
    return makeError(what + " '" + dir + "' " + why +
                     "; refusing to replace it");
  };
  llvm::SmallString<256> manifestPath(dir);
  path::append(manifestPath, "manifest.json");
  if (!fs::exists(manifestPath))
    return refuse("is not empty and holds no manifest.json");
  auto manifest = Manifest::load(manifestPath);
  if (!manifest) {
    // The loader's reason is about the file's contents; what matters here
    // is that nothing proves the directory is ppc's.
    llvm::consumeError(manifest.takeError());
    return refuse("holds a manifest.json that ppc cannot read as a manifest");
  }
  std::set<std::string> named{"manifest.json"};
  for (const StageInfo &s : manifest->stages)
    named.insert(s.file);
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec, /*follow=*/false), end;
       it != end && !ec; it.increment(ec)) {
    std::string name = path::filename(it->path()).str();
    if (!named.count(name) && !isMetaCacheFileName(name))
      return refuse("holds '" + name +
                    "', which is not part of the earlier ppc output there");
    auto status = it->status();
    if (!status || status->type() != fs::file_type::regular_file)
      return refuse("holds '" + name + "', which is not a regular file");
  }
  if (ec)
    return makeError("cannot read " + what + " '" + dir + "': " + ec.message());
  return llvm::Error::success();
}

} // namespace ppc
