//===- fuzz/ClangCxx20Json.h - LLVM 14's JSON.h hidden from clang 14 -*- C++
//-*-===//
//
// Force-included (-include) into the C++20 sources of fuzz_pt2 by
// fuzz/CMakeLists.txt. clang 14 cannot compile LLVM 14's llvm/Support/JSON.h as
// C++20 against libstdc++ 12: it instantiates the constexpr members of
// std::vector<json::Value> inside json::Array, before json::Value is complete
// ("arithmetic on a pointer to an incomplete type"; gcc and clang 15 do not).
// LibTorch 2.x needs C++20, and lib/SafeRead.h includes JSON.h for one
// declaration (parseJSONBounded) that the .pt2 reader does not call, so this
// header takes JSON.h's include guard, includes what JSON.h would have, and
// declares json::Value. lib/SafeRead.cpp, which does parse with llvm::json and
// includes no LibTorch header that needs C++20, is compiled as C++17 there
// instead.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_FUZZ_CLANGCXX20JSON_H
#define PPC_FUZZ_CLANGCXX20JSON_H

#define LLVM_SUPPORT_JSON_H

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

namespace llvm::json {
class Value;
} // namespace llvm::json

#endif // PPC_FUZZ_CLANGCXX20JSON_H
