#include "workers/checkpoint/torch_pickle.h"

#include <cstring>
#include <deque>
#include <map>
#include <unordered_map>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace coil::checkpoint {

const char* TorchStorageName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "FloatStorage";
    case DType::kF16:
      return "HalfStorage";
    case DType::kBF16:
      return "BFloat16Storage";
  }
  return "?";
}

namespace {

// Pickle opcodes (Python's Lib/pickletools.py names them).
enum Op : uint8_t {
  kMark = '(',
  kStop = '.',
  kBinInt = 'J',
  kBinInt1 = 'K',
  kBinInt2 = 'M',
  kNone = 'N',
  kBinPersId = 'Q',
  kReduce = 'R',
  kBinUnicode = 'X',
  kAppend = 'a',
  kBuild = 'b',
  kGlobal = 'c',
  kAppends = 'e',
  kBinGet = 'h',
  kLongBinGet = 'j',
  kEmptyList = ']',
  kBinPut = 'q',
  kLongBinPut = 'r',
  kSetItem = 's',
  kTuple = 't',
  kSetItems = 'u',
  kEmptyDict = '}',
  kEmptyTuple = ')',
  kBinFloat = 'G',
  kProto = 0x80,
  kTuple1 = 0x85,
  kTuple2 = 0x86,
  kTuple3 = 0x87,
  kNewTrue = 0x88,
  kNewFalse = 0x89,
  kLong1 = 0x8a,
  kShortBinUnicode = 0x8c,
  kStackGlobal = 0x93,
  kMemoize = 0x94,
  kFrame = 0x95,
};

const char* OpName(uint8_t op) {
  switch (op) {
    case '(':
      return "MARK";
    case '.':
      return "STOP";
    case '0':
      return "POP";
    case '1':
      return "POP_MARK";
    case '2':
      return "DUP";
    case 'F':
      return "FLOAT";
    case 'I':
      return "INT";
    case 'J':
      return "BININT";
    case 'K':
      return "BININT1";
    case 'L':
      return "LONG";
    case 'M':
      return "BININT2";
    case 'N':
      return "NONE";
    case 'P':
      return "PERSID";
    case 'Q':
      return "BINPERSID";
    case 'R':
      return "REDUCE";
    case 'S':
      return "STRING";
    case 'T':
      return "BINSTRING";
    case 'U':
      return "SHORT_BINSTRING";
    case 'V':
      return "UNICODE";
    case 'X':
      return "BINUNICODE";
    case 'a':
      return "APPEND";
    case 'b':
      return "BUILD";
    case 'c':
      return "GLOBAL";
    case 'd':
      return "DICT";
    case '}':
      return "EMPTY_DICT";
    case 'e':
      return "APPENDS";
    case 'g':
      return "GET";
    case 'h':
      return "BINGET";
    case 'i':
      return "INST";
    case 'j':
      return "LONG_BINGET";
    case 'l':
      return "LIST";
    case ']':
      return "EMPTY_LIST";
    case 'o':
      return "OBJ";
    case 'p':
      return "PUT";
    case 'q':
      return "BINPUT";
    case 'r':
      return "LONG_BINPUT";
    case 's':
      return "SETITEM";
    case 't':
      return "TUPLE";
    case ')':
      return "EMPTY_TUPLE";
    case 'u':
      return "SETITEMS";
    case 'G':
      return "BINFLOAT";
    case 0x80:
      return "PROTO";
    case 0x81:
      return "NEWOBJ";
    case 0x82:
      return "EXT1";
    case 0x83:
      return "EXT2";
    case 0x84:
      return "EXT4";
    case 0x85:
      return "TUPLE1";
    case 0x86:
      return "TUPLE2";
    case 0x87:
      return "TUPLE3";
    case 0x88:
      return "NEWTRUE";
    case 0x89:
      return "NEWFALSE";
    case 0x8a:
      return "LONG1";
    case 0x8b:
      return "LONG4";
    case 0x8c:
      return "SHORT_BINUNICODE";
    case 0x8d:
      return "BINUNICODE8";
    case 0x8e:
      return "BINBYTES8";
    case 0x8f:
      return "EMPTY_SET";
    case 0x90:
      return "ADDITEMS";
    case 0x91:
      return "FROZENSET";
    case 0x92:
      return "NEWOBJ_EX";
    case 0x93:
      return "STACK_GLOBAL";
    case 0x94:
      return "MEMOIZE";
    case 0x95:
      return "FRAME";
    case 0x96:
      return "BYTEARRAY8";
    case 0x97:
      return "NEXT_BUFFER";
    case 0x98:
      return "READONLY_BUFFER";
    case 'B':
      return "BINBYTES";
    case 'C':
      return "SHORT_BINBYTES";
    default:
      return "unknown";
  }
}

// What the allowed globals stand for.
enum class Callable { kNone, kOrderedDict, kRebuildTensor, kStorage };

struct Value {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kTuple,
    kList,
    kDict,
    kGlobal,
    kStorage,
    kTensor
  };
  Kind kind = Kind::kNone;
  int64_t integer = 0;
  double real = 0;
  std::string text;                 // string; storage key
  std::vector<const Value*> items;  // tuple, list; dict as key, value, key, value...
  Callable callable = Callable::kNone;
  DType dtype = DType::kF32;  // a storage global's or a storage's element type
  PickledTensor tensor;
};

const char* KindName(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kTuple:
      return "tuple";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kGlobal:
      return "global";
    case Value::Kind::kStorage:
      return "storage";
    case Value::Kind::kTensor:
      return "tensor";
  }
  return "?";
}

constexpr size_t kMaxStack = 1 << 20;
constexpr size_t kMaxMemo = 1 << 20;

class Unpickler {
 public:
  explicit Unpickler(absl::Span<const uint8_t> bytes) : bytes_(bytes) {}

  absl::StatusOr<std::vector<PickledTensor>> Run();

 private:
  absl::Status Error(const std::string& detail) const {
    return absl::InvalidArgumentError(
        absl::StrCat("pickle ", detail, " at byte ", op_offset_,
                     "; coil reads only the state dicts torch.save writes"));
  }
  absl::Status Truncated() const {
    return absl::DataLossError(absl::StrCat("pickle opcode at byte ", op_offset_,
                                            " runs past the end of the ", bytes_.size(),
                                            "-byte stream; the file is truncated"));
  }
  absl::StatusOr<uint64_t> ReadLe(int size) {
    if (bytes_.size() - pos_ < static_cast<size_t>(size)) return Truncated();
    uint64_t value = 0;
    for (int i = size - 1; i >= 0; --i) value = (value << 8) | bytes_[pos_ + i];
    pos_ += size;
    return value;
  }
  absl::StatusOr<std::string> ReadBytes(uint64_t size) {
    if (bytes_.size() - pos_ < size) return Truncated();
    std::string out(reinterpret_cast<const char*>(bytes_.data() + pos_), size);
    pos_ += size;
    return out;
  }
  absl::StatusOr<std::string> ReadLine() {
    const uint8_t* start = bytes_.data() + pos_;
    const void* newline = std::memchr(start, '\n', std::min<size_t>(bytes_.size() - pos_, 256));
    if (newline == nullptr) {
      if (bytes_.size() - pos_ > 256) return Error("GLOBAL name longer than 256 bytes");
      return Truncated();
    }
    size_t length = static_cast<const uint8_t*>(newline) - start;
    std::string line(reinterpret_cast<const char*>(start), length);
    pos_ += length + 1;
    return line;
  }

  Value* New(Value::Kind kind) {
    arena_.emplace_back();
    arena_.back().kind = kind;
    return &arena_.back();
  }
  absl::Status Push(const Value* value) {
    if (stack_.size() >= kMaxStack) return Error("stack deeper than 2^20");
    stack_.push_back(value);
    return absl::OkStatus();
  }
  absl::StatusOr<const Value*> Pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back())) {
      return Error("stack underflow");
    }
    const Value* value = stack_.back();
    stack_.pop_back();
    return value;
  }
  absl::StatusOr<std::vector<const Value*>> PopToMark() {
    if (marks_.empty()) return Error("no MARK before the opcode");
    size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<const Value*> items(stack_.begin() + mark, stack_.end());
    stack_.resize(mark);
    return items;
  }
  // The top of the stack as a mutable container of `kind` (containers are arena-owned and
  // only ever mutated through the stack, as pickle does).
  absl::StatusOr<Value*> Top(Value::Kind kind, const char* opcode) {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back())) {
      return Error(absl::StrCat(opcode, " on an empty stack"));
    }
    if (stack_.back()->kind != kind) {
      return Error(absl::StrCat(opcode, " on a ", KindName(stack_.back()->kind)));
    }
    return const_cast<Value*>(stack_.back());
  }
  absl::Status Memo(uint64_t index) {
    if (stack_.empty()) return Error("memo store with an empty stack");
    if (memo_.size() >= kMaxMemo && !memo_.count(index)) return Error("memo over 2^20 entries");
    memo_[index] = stack_.back();
    return absl::OkStatus();
  }
  absl::Status Global(const std::string& module, const std::string& name);
  absl::Status PersistentId(const Value* pid);
  absl::Status Reduce(const Value* callable, const Value* args);

  absl::Span<const uint8_t> bytes_;
  size_t pos_ = 0;
  size_t op_offset_ = 0;
  std::deque<Value> arena_;  // owns every value; stable addresses; cycles are harmless
  std::vector<const Value*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, const Value*> memo_;
};

absl::Status Unpickler::Global(const std::string& module, const std::string& name) {
  Value* value = New(Value::Kind::kGlobal);
  value->text = absl::StrCat(module, ".", name);
  if (module == "collections" && name == "OrderedDict") {
    value->callable = Callable::kOrderedDict;
  } else if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
    value->callable = Callable::kRebuildTensor;
  } else if (module == "torch" && name == "FloatStorage") {
    value->callable = Callable::kStorage;
    value->dtype = DType::kF32;
  } else if (module == "torch" && name == "HalfStorage") {
    value->callable = Callable::kStorage;
    value->dtype = DType::kF16;
  } else if (module == "torch" && name == "BFloat16Storage") {
    value->callable = Callable::kStorage;
    value->dtype = DType::kBF16;
  } else {
    std::string shown = value->text.size() > 80 ? value->text.substr(0, 80) + "..." : value->text;
    return Error(absl::StrCat(
        "global ", absl::CEscape(shown),
        " is not allowed (allowed: collections.OrderedDict, torch._utils._rebuild_tensor_v2, "
        "torch.FloatStorage, torch.HalfStorage, torch.BFloat16Storage)"));
  }
  return Push(value);
}

absl::Status Unpickler::PersistentId(const Value* pid) {
  // ('storage', torch.HalfStorage, key, location, numel)
  if (pid->kind != Value::Kind::kTuple || pid->items.size() != 5 ||
      pid->items[0]->kind != Value::Kind::kString || pid->items[0]->text != "storage" ||
      pid->items[1]->kind != Value::Kind::kGlobal ||
      pid->items[1]->callable != Callable::kStorage ||
      pid->items[2]->kind != Value::Kind::kString || pid->items[4]->kind != Value::Kind::kInt ||
      pid->items[4]->integer < 0) {
    return Error("BINPERSID argument is not ('storage', torch.<T>Storage, key, location, numel)");
  }
  Value* storage = New(Value::Kind::kStorage);
  storage->dtype = pid->items[1]->dtype;
  storage->text = pid->items[2]->text;
  storage->integer = pid->items[4]->integer;
  return Push(storage);
}

absl::Status Unpickler::Reduce(const Value* callable, const Value* args) {
  if (callable->kind != Value::Kind::kGlobal || args->kind != Value::Kind::kTuple) {
    return Error(
        absl::StrCat("REDUCE of a ", KindName(callable->kind), " with a ", KindName(args->kind)));
  }
  if (callable->callable == Callable::kOrderedDict) {
    if (!args->items.empty()) return Error("collections.OrderedDict called with arguments");
    return Push(New(Value::Kind::kDict));
  }
  if (callable->callable != Callable::kRebuildTensor) {
    return Error(absl::StrCat("REDUCE calls ", callable->text, ", which is not callable here"));
  }
  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
  //                    backward_hooks[, metadata])
  const std::vector<const Value*>& a = args->items;
  auto int_tuple = [](const Value* value, std::vector<int64_t>& out) {
    if (value->kind != Value::Kind::kTuple || value->items.size() > 8) return false;
    for (const Value* item : value->items) {
      if (item->kind != Value::Kind::kInt) return false;
      out.push_back(item->integer);
    }
    return true;
  };
  Value* tensor = New(Value::Kind::kTensor);
  if ((a.size() != 6 && a.size() != 7) || a[0]->kind != Value::Kind::kStorage ||
      a[1]->kind != Value::Kind::kInt || !int_tuple(a[2], tensor->tensor.shape) ||
      !int_tuple(a[3], tensor->tensor.stride) || a[4]->kind != Value::Kind::kBool ||
      tensor->tensor.shape.size() != tensor->tensor.stride.size()) {
    return Error(
        "torch._utils._rebuild_tensor_v2 arguments are not (storage, offset, size, stride, "
        "requires_grad, hooks)");
  }
  tensor->tensor.storage_key = a[0]->text;
  tensor->tensor.dtype = a[0]->dtype;
  tensor->tensor.storage_numel = a[0]->integer;
  tensor->tensor.storage_offset = a[1]->integer;
  return Push(tensor);
}

absl::StatusOr<std::vector<PickledTensor>> Unpickler::Run() {
  while (true) {
    op_offset_ = pos_;
    if (pos_ >= bytes_.size()) return Truncated();
    uint8_t op = bytes_[pos_++];
    switch (op) {
      case kProto: {
        COIL_ASSIGN_OR_RETURN(uint64_t version, ReadLe(1));
        if (version < 2 || version > 5) return Error(absl::StrCat("protocol ", version));
        break;
      }
      case kFrame:
        COIL_RETURN_IF_ERROR(ReadLe(8).status());
        break;
      case kMark:
        if (marks_.size() >= kMaxStack) return Error("too many MARKs");
        marks_.push_back(stack_.size());
        break;
      case kEmptyDict:
        COIL_RETURN_IF_ERROR(Push(New(Value::Kind::kDict)));
        break;
      case kEmptyList:
        COIL_RETURN_IF_ERROR(Push(New(Value::Kind::kList)));
        break;
      case kEmptyTuple:
        COIL_RETURN_IF_ERROR(Push(New(Value::Kind::kTuple)));
        break;
      case kNone:
        COIL_RETURN_IF_ERROR(Push(New(Value::Kind::kNone)));
        break;
      case kNewTrue:
      case kNewFalse: {
        Value* value = New(Value::Kind::kBool);
        value->integer = op == kNewTrue;
        COIL_RETURN_IF_ERROR(Push(value));
        break;
      }
      case kBinInt1:
      case kBinInt2:
      case kBinInt: {
        int size = op == kBinInt1 ? 1 : op == kBinInt2 ? 2 : 4;
        COIL_ASSIGN_OR_RETURN(uint64_t raw, ReadLe(size));
        Value* value = New(Value::Kind::kInt);
        value->integer = op == kBinInt ? static_cast<int32_t>(raw) : static_cast<int64_t>(raw);
        COIL_RETURN_IF_ERROR(Push(value));
        break;
      }
      case kLong1: {
        COIL_ASSIGN_OR_RETURN(uint64_t size, ReadLe(1));
        if (size > 8) return Error(absl::StrCat("LONG1 of ", size, " bytes (limit 8)"));
        COIL_ASSIGN_OR_RETURN(uint64_t raw, ReadLe(static_cast<int>(size)));
        Value* value = New(Value::Kind::kInt);
        if (size > 0 && size < 8 && (raw >> (8 * size - 1)) & 1) raw |= ~uint64_t{0} << (8 * size);
        value->integer = static_cast<int64_t>(raw);
        COIL_RETURN_IF_ERROR(Push(value));
        break;
      }
      case kBinFloat: {
        // Big-endian IEEE double.
        if (bytes_.size() - pos_ < 8) return Truncated();
        uint64_t raw = 0;
        for (int i = 0; i < 8; ++i) raw = (raw << 8) | bytes_[pos_ + i];
        pos_ += 8;
        Value* value = New(Value::Kind::kFloat);
        std::memcpy(&value->real, &raw, sizeof(raw));
        COIL_RETURN_IF_ERROR(Push(value));
        break;
      }
      case kBinUnicode:
      case kShortBinUnicode: {
        COIL_ASSIGN_OR_RETURN(uint64_t size, ReadLe(op == kBinUnicode ? 4 : 1));
        Value* value = New(Value::Kind::kString);
        COIL_ASSIGN_OR_RETURN(value->text, ReadBytes(size));
        COIL_RETURN_IF_ERROR(Push(value));
        break;
      }
      case kGlobal: {
        COIL_ASSIGN_OR_RETURN(std::string module, ReadLine());
        COIL_ASSIGN_OR_RETURN(std::string name, ReadLine());
        COIL_RETURN_IF_ERROR(Global(module, name));
        break;
      }
      case kStackGlobal: {
        COIL_ASSIGN_OR_RETURN(const Value* name, Pop());
        COIL_ASSIGN_OR_RETURN(const Value* module, Pop());
        if (name->kind != Value::Kind::kString || module->kind != Value::Kind::kString) {
          return Error("STACK_GLOBAL without two strings");
        }
        COIL_RETURN_IF_ERROR(Global(module->text, name->text));
        break;
      }
      case kBinPut:
      case kLongBinPut: {
        COIL_ASSIGN_OR_RETURN(uint64_t index, ReadLe(op == kBinPut ? 1 : 4));
        COIL_RETURN_IF_ERROR(Memo(index));
        break;
      }
      case kMemoize:
        COIL_RETURN_IF_ERROR(Memo(memo_.size()));
        break;
      case kBinGet:
      case kLongBinGet: {
        COIL_ASSIGN_OR_RETURN(uint64_t index, ReadLe(op == kBinGet ? 1 : 4));
        auto found = memo_.find(index);
        if (found == memo_.end()) return Error(absl::StrCat("memo key ", index, " is not set"));
        COIL_RETURN_IF_ERROR(Push(found->second));
        break;
      }
      case kTuple:
      case kTuple1:
      case kTuple2:
      case kTuple3: {
        Value* tuple = New(Value::Kind::kTuple);
        if (op == kTuple) {
          COIL_ASSIGN_OR_RETURN(tuple->items, PopToMark());
        } else {
          tuple->items.resize(op - kTuple1 + 1);
          for (size_t i = tuple->items.size(); i-- > 0;) {
            COIL_ASSIGN_OR_RETURN(tuple->items[i], Pop());
          }
        }
        COIL_RETURN_IF_ERROR(Push(tuple));
        break;
      }
      case kAppend: {
        COIL_ASSIGN_OR_RETURN(const Value* item, Pop());
        COIL_ASSIGN_OR_RETURN(Value * list, Top(Value::Kind::kList, "APPEND"));
        list->items.push_back(item);
        break;
      }
      case kAppends: {
        COIL_ASSIGN_OR_RETURN(std::vector<const Value*> items, PopToMark());
        COIL_ASSIGN_OR_RETURN(Value * list, Top(Value::Kind::kList, "APPENDS"));
        list->items.insert(list->items.end(), items.begin(), items.end());
        break;
      }
      case kSetItem: {
        COIL_ASSIGN_OR_RETURN(const Value* value, Pop());
        COIL_ASSIGN_OR_RETURN(const Value* key, Pop());
        COIL_ASSIGN_OR_RETURN(Value * dict, Top(Value::Kind::kDict, "SETITEM"));
        dict->items.push_back(key);
        dict->items.push_back(value);
        break;
      }
      case kSetItems: {
        COIL_ASSIGN_OR_RETURN(std::vector<const Value*> items, PopToMark());
        if (items.size() % 2 != 0) return Error("SETITEMS with an odd number of items");
        COIL_ASSIGN_OR_RETURN(Value * dict, Top(Value::Kind::kDict, "SETITEMS"));
        dict->items.insert(dict->items.end(), items.begin(), items.end());
        break;
      }
      case kBinPersId: {
        COIL_ASSIGN_OR_RETURN(const Value* pid, Pop());
        COIL_RETURN_IF_ERROR(PersistentId(pid));
        break;
      }
      case kReduce: {
        COIL_ASSIGN_OR_RETURN(const Value* args, Pop());
        COIL_ASSIGN_OR_RETURN(const Value* callable, Pop());
        COIL_RETURN_IF_ERROR(Reduce(callable, args));
        break;
      }
      case kBuild: {
        // OrderedDict's instance state ({'_metadata': ...}): version info coil ignores.
        COIL_ASSIGN_OR_RETURN(const Value* state, Pop());
        if (state->kind != Value::Kind::kDict && state->kind != Value::Kind::kNone) {
          return Error(absl::StrCat("BUILD with a ", KindName(state->kind), " state"));
        }
        COIL_RETURN_IF_ERROR(Top(Value::Kind::kDict, "BUILD").status());
        break;
      }
      case kStop: {
        if (stack_.size() != 1 || !marks_.empty()) {
          return Error(absl::StrCat("STOP with ", stack_.size(), " values on the stack"));
        }
        const Value* root = stack_.back();
        if (root->kind != Value::Kind::kDict) {
          return Error(absl::StrCat("result is a ", KindName(root->kind), ", not a state dict"));
        }
        std::vector<PickledTensor> tensors;
        for (size_t i = 0; i + 1 < root->items.size(); i += 2) {
          const Value* key = root->items[i];
          const Value* value = root->items[i + 1];
          if (key->kind != Value::Kind::kString) {
            return Error(absl::StrCat("state dict key ", i / 2, " is a ", KindName(key->kind)));
          }
          if (value->kind != Value::Kind::kTensor) {
            return Error(absl::StrCat("state dict entry ", absl::CEscape(key->text), " is a ",
                                      KindName(value->kind), ", not a tensor"));
          }
          PickledTensor tensor = value->tensor;
          tensor.name = key->text;
          tensors.push_back(std::move(tensor));
        }
        return tensors;
      }
      default:
        return Error(absl::StrFormat("opcode 0x%02x (%s) is not allowed", op, OpName(op)));
    }
  }
}

// The writer: Python's pickle module at protocol 2, as torch.save drives it.
class PickleWriter {
 public:
  std::string Finish() { return std::move(out_); }

  void Op(uint8_t op) { out_.push_back(static_cast<char>(op)); }
  void Le(uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
  // Memoises the value just written, as the pickler does for every object.
  uint32_t Put() {
    uint32_t index = next_memo_++;
    if (index < 256) {
      Op(kBinPut);
      Le(index, 1);
    } else {
      Op(kLongBinPut);
      Le(index, 4);
    }
    return index;
  }
  void Get(uint32_t index) {
    if (index < 256) {
      Op(kBinGet);
      Le(index, 1);
    } else {
      Op(kLongBinGet);
      Le(index, 4);
    }
  }
  // Strings are memoised by content: in torch.save's output equal strings ("storage",
  // "cpu", a shared storage's key) are one object, which the pickler writes once.
  void String(const std::string& text) {
    auto found = strings_.find(text);
    if (found != strings_.end()) {
      Get(found->second);
      return;
    }
    Op(kBinUnicode);
    Le(text.size(), 4);
    out_ += text;
    strings_[text] = Put();
  }
  void Int(int64_t value) {
    if (value >= 0 && value < 256) {
      Op(kBinInt1);
      Le(value, 1);
    } else if (value >= 0 && value < 65536) {
      Op(kBinInt2);
      Le(value, 2);
    } else if (value >= INT32_MIN && value <= INT32_MAX) {
      Op(kBinInt);
      Le(static_cast<uint32_t>(value), 4);
    } else {
      // LONG1: the shortest little-endian two's complement, as pickle's encode_long.
      int size = 8;
      while (size > 1) {
        int64_t shifted = value >> (8 * (size - 1) - 1);
        if (shifted != 0 && shifted != -1) break;
        --size;
      }
      Op(kLong1);
      Le(size, 1);
      Le(static_cast<uint64_t>(value), size);
    }
  }
  // A global, memoised on first use and fetched with BINGET afterwards.
  void Global(const std::string& module, const std::string& name) {
    std::string key = module + "\n" + name + "\n";
    auto found = globals_.find(key);
    if (found != globals_.end()) {
      Get(found->second);
      return;
    }
    Op(kGlobal);
    out_ += key;
    globals_[key] = Put();
  }
  void IntTuple(const std::vector<int64_t>& values) {
    if (values.empty()) {
      Op(kEmptyTuple);
      return;  // the empty tuple is a singleton: pickle does not memoise it
    }
    if (values.size() > 3) Op(kMark);
    for (int64_t value : values) Int(value);
    Op(values.size() == 1   ? kTuple1
       : values.size() == 2 ? kTuple2
       : values.size() == 3 ? kTuple3
                            : kTuple);
    Put();
  }

 private:
  std::string out_;
  uint32_t next_memo_ = 0;
  std::map<std::string, uint32_t> globals_;
  std::map<std::string, uint32_t> strings_;
};

}  // namespace

absl::StatusOr<std::vector<PickledTensor>> ParseTorchStateDict(absl::Span<const uint8_t> pickle) {
  Unpickler unpickler(pickle);
  return unpickler.Run();
}

std::string WriteTorchStateDict(const std::vector<PickledTensor>& tensors) {
  PickleWriter w;
  w.Op(kProto);
  w.Le(2, 1);
  // OrderedDict() via REDUCE, then the items in batches of 1000 (pickle's _BATCHSIZE).
  w.Global("collections", "OrderedDict");
  w.Op(kEmptyTuple);
  w.Op(kReduce);
  w.Put();
  for (size_t batch = 0; batch < tensors.size(); batch += 1000) {
    size_t end = std::min(tensors.size(), batch + 1000);
    if (end - batch > 1) w.Op(kMark);
    for (size_t i = batch; i < end; ++i) {
      const PickledTensor& tensor = tensors[i];
      w.String(tensor.name);
      w.Global("torch._utils", "_rebuild_tensor_v2");
      w.Op(kMark);
      // The persistent id tuple, then BINPERSID.
      w.Op(kMark);
      w.String("storage");
      w.Global("torch", TorchStorageName(tensor.dtype));
      w.String(tensor.storage_key);
      w.String("cpu");
      w.Int(tensor.storage_numel);
      w.Op(kTuple);
      w.Put();
      w.Op(kBinPersId);
      w.Int(tensor.storage_offset);
      w.IntTuple(tensor.shape);
      w.IntTuple(tensor.stride);
      w.Op(kNewFalse);  // requires_grad
      w.Global("collections", "OrderedDict");
      w.Op(kEmptyTuple);
      w.Op(kReduce);  // backward_hooks: an empty OrderedDict
      w.Put();
      w.Op(kTuple);
      w.Put();
      w.Op(kReduce);
      w.Put();
    }
    w.Op(end - batch > 1 ? kSetItems : kSetItem);
  }
  // state_dict()'s _metadata attribute: {'_metadata': OrderedDict({'': {'version': 1}})}.
  w.Op(kEmptyDict);
  w.Put();
  w.String("_metadata");
  w.Global("collections", "OrderedDict");
  w.Op(kEmptyTuple);
  w.Op(kReduce);
  w.Put();
  w.String("");
  w.Op(kEmptyDict);
  w.Put();
  w.String("version");
  w.Int(1);
  w.Op(kSetItem);
  w.Op(kSetItem);
  w.Op(kSetItem);
  w.Op(kBuild);
  w.Op(kStop);
  return w.Finish();
}

}  // namespace coil::checkpoint
