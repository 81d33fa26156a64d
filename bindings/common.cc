#include "common.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <string_view>
#include <unordered_map>

#ifdef __linux__
#include <sys/mman.h>
#endif

#include "common/parallel.h"

namespace tirl::binding {

namespace {

const char* typed_array_name(napi_typedarray_type type) {
  switch (type) {
    case napi_int8_array: return "Int8Array";
    case napi_uint8_array: return "Uint8Array";
    case napi_uint8_clamped_array: return "Uint8ClampedArray";
    case napi_int16_array: return "Int16Array";
    case napi_uint16_array: return "Uint16Array";
    case napi_int32_array: return "Int32Array";
    case napi_uint32_array: return "Uint32Array";
    case napi_float32_array: return "Float32Array";
    case napi_float64_array: return "Float64Array";
    case napi_bigint64_array: return "BigInt64Array";
    case napi_biguint64_array: return "BigUint64Array";
    default: break;
  }
  return "TypedArray";
}

const char* status_name(tirl_status status) {
  switch (status) {
    case TIRL_OK: return "TIRL_OK";
    case TIRL_ERROR_INVALID_ARGUMENT: return "TIRL_ERROR_INVALID_ARGUMENT";
    case TIRL_ERROR_OUT_OF_MEMORY: return "TIRL_ERROR_OUT_OF_MEMORY";
    case TIRL_ERROR_UNSUPPORTED: return "TIRL_ERROR_UNSUPPORTED";
    case TIRL_ERROR_CUDA: return "TIRL_ERROR_CUDA";
    case TIRL_ERROR_INTERNAL: return "TIRL_ERROR_INTERNAL";
  }
  return "TIRL_ERROR_UNKNOWN";
}

// Memory for the private copies of async calls. Only the pages of the arrays copied into a
// block are touched, and large blocks freed by finished calls are kept for the next ones:
// the first touch of a fresh page costs a page fault (~11 µs per 4 KiB on virtual machines,
// far more than copying it), which a trainer calling an async op in a loop would otherwise
// pay on every call. At most two blocks of up to 512 MiB are kept, about two calls' inputs:
// a bigger copy is rare and would hold gigabytes while idle. Small blocks (a few KiB, the
// copies of a small call) are kept too, sixteen at most: malloc and free cost more than
// copying them. Process-wide, as malloc is:
// the calls of all worker threads share it.
class CopyMemory {
 public:
  // A block of at least `bytes` bytes; sets `capacity` to its size.
  uint8_t* take(size_t bytes, size_t* capacity) {
    if (bytes <= kSmall) {
      // The smallest kept block that holds `bytes`: a small call's copies come and go in
      // the same sizes, and glibc's malloc and free of a few KiB cost ~450 instructions.
      std::lock_guard<std::mutex> lock(mutex_);
      size_t best = small_count_;
      for (size_t i = 0; i < small_count_; ++i) {
        if (small_[i].second >= bytes && (best == small_count_ || small_[i].second < small_[best].second)) best = i;
      }
      if (best != small_count_) {
        uint8_t* block = small_[best].first;
        *capacity = small_[best].second;
        small_[best] = small_[--small_count_];
        return block;
      }
    }
    if (bytes >= kLarge) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto best = kept_.end();
      for (auto it = kept_.begin(); it != kept_.end(); ++it) {
        if (it->second >= bytes && (best == kept_.end() || it->second < best->second)) best = it;
      }
      if (best != kept_.end()) {
        uint8_t* block = best->first;
        *capacity = best->second;
        kept_.erase(best);
        return block;
      }
    }
    void* block = nullptr;
    if (bytes >= kLarge) {
      if (posix_memalign(&block, kLarge, bytes) != 0) block = nullptr;
#ifdef MADV_HUGEPAGE
      if (block != nullptr) madvise(block, bytes & ~(kLarge - 1), MADV_HUGEPAGE);
#endif
    } else {
      block = std::malloc(bytes);
    }
    if (block == nullptr) throw std::bad_alloc();
    *capacity = bytes;
    return static_cast<uint8_t*>(block);
  }

  void give(uint8_t* block, size_t capacity) {
    if (capacity <= kSmall) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (small_count_ < kSmallKept) {
        small_[small_count_++] = {block, capacity};
        return;
      }
    }
    if (capacity >= kLarge && capacity <= kLargestKept) {
      std::lock_guard<std::mutex> lock(mutex_);
      kept_.emplace_back(block, capacity);
      if (kept_.size() <= kKept) return;
      block = kept_.front().first;  // the oldest goes
      kept_.erase(kept_.begin());
    }
    std::free(block);
  }

 private:
  static constexpr size_t kLarge = size_t{2} << 20;  // a huge page
  static constexpr size_t kLargestKept = size_t{512} << 20;
  static constexpr size_t kKept = 2;
  // Small blocks kept: up to kSmallKept of at most kSmall bytes (1 MiB in all), enough for
  // a few calls in flight of an op's usual eight arrays.
  static constexpr size_t kSmall = size_t{64} << 10;
  static constexpr size_t kSmallKept = 16;
  std::mutex mutex_;
  std::vector<std::pair<uint8_t*, size_t>> kept_;  // oldest first
  std::pair<uint8_t*, size_t> small_[kSmallKept] = {};
  size_t small_count_ = 0;
};

// Never destroyed: a worker thread's calls may give memory back while the process exits.
CopyMemory& copy_memory() {
  static CopyMemory* memory = new CopyMemory();
  return *memory;
}

// memcpy on the core's thread pool: the copies of an async call are made on the main
// thread, which they block, and one core alone copies at a fraction of memory bandwidth.
void copy_bytes(uint8_t* to, const uint8_t* from, size_t bytes) {
  constexpr size_t kChunk = size_t{4} << 20;
  if (bytes <= kChunk) {  // one chunk: no parallel_for to set up
    std::memcpy(to, from, bytes);
    return;
  }
  auto body = [&](int64_t chunk) {
    const size_t begin = static_cast<size_t>(chunk) * kChunk;
    std::memcpy(to + begin, from + begin, std::min(kChunk, bytes - begin));
  };
  parallel_for(chunk_count(static_cast<int64_t>(bytes), static_cast<int64_t>(kChunk)), body);
}

bool word_char(char c);

// Drops the exception a failed Node-API call left pending (a cache then falls back).
void clear_pending_exception(napi_env env) {
  bool pending = false;
  if (napi_is_exception_pending(env, &pending) == napi_ok && pending) {
    napi_value ignored;
    napi_get_and_clear_last_exception(env, &ignored);
  }
}

// The one T of each environment (Node's main thread and each worker thread have their
// own, and an environment lives on one thread), made on its first use and deleted by the
// environment's cleanup hook. T derives from PerEnvironment<T> (which then must be its
// friend), sets ok_ in its constructor and deletes its references in its destructor.
template <class T>
class PerEnvironment {
 public:
  // This environment's T; nullptr if it cannot be made.
  static T* of(napi_env env) {
    T*& slot = current();
    if (slot == nullptr || slot->env_ != env) {
      auto* fresh = new T(env);
      if (!fresh->ok_ || napi_add_env_cleanup_hook(env, &PerEnvironment::drop, fresh) != napi_ok) {
        delete fresh;
        return nullptr;
      }
      slot = fresh;  // a previous one belonged to an environment already gone
    }
    return slot;
  }

 protected:
  explicit PerEnvironment(napi_env env) : env_(env) {}
  napi_env env_;
  bool ok_ = false;

 private:
  static T*& current() {
    thread_local T* slot = nullptr;
    return slot;
  }
  static void drop(void* data) {
    T* self = static_cast<T*>(data);
    if (current() == self) current() = nullptr;
    delete self;
  }
};

// The V8 strings of option names, made once per environment: making (and internalising)
// a string from UTF-8 for each of the ~30 keys that ppoLoss reads cost more than its kernel
// on 1,024 tokens. Node-API 8 cannot reference a string, so they are the elements of one
// referenced array. An environment lives on one thread, so each thread has the cache of its
// environment, dropped by the environment's cleanup hook.
class KeyCache : public PerEnvironment<KeyCache> {
 public:
  // `name` as a property key of `env` (nullptr if Node-API fails: the caller then makes one).
  static napi_value key(napi_env env, const char* name) {
    KeyCache* cache = of(env);
    if (cache == nullptr) return nullptr;
    napi_value array;
    if (napi_get_reference_value(env, cache->array_, &array) != napi_ok || array == nullptr) {
      return nullptr;
    }
    return cache->get(array, name);
  }

  // The keys of `count` names into `keys` (nullptr for one Node-API failed to make).
  static void keys(napi_env env, const char* const* names, size_t count, napi_value* keys) {
    KeyCache* cache = of(env);
    napi_value array = nullptr;
    if (cache == nullptr || napi_get_reference_value(env, cache->array_, &array) != napi_ok ||
        array == nullptr) {
      for (size_t i = 0; i < count; ++i) keys[i] = nullptr;
      return;
    }
    for (size_t i = 0; i < count; ++i) keys[i] = cache->get(array, names[i]);
  }

  // A function (v0, v1, ...) => ({ [names[0]]: v0, ... }), compiled once per environment
  // for each list of names (nullptr if Node-API fails). An object literal in JavaScript takes
  // V8's fast path (a boilerplate of the final shape), where defining the same properties
  // through Node-API walks the shape transitions one property at a time: about 1,800 x86
  // instructions a property, against about 150 for the call and the literal.
  static napi_value object_maker(napi_env env, const char* const* names, size_t count) {
    KeyCache* cache = of(env);
    if (cache == nullptr) return nullptr;
    for (const Maker& maker : cache->makers_) {
      if (maker.names.size() == count && std::equal(maker.names.begin(), maker.names.end(), names)) {
        napi_value function;
        return napi_get_reference_value(env, maker.function, &function) == napi_ok ? function : nullptr;
      }
    }
    // Bounded: rolloutCorrection's metrics have a list of names per choice of options.
    if (cache->makers_.size() == kMostMakers) return nullptr;
    std::string source = "(function (";
    for (size_t i = 0; i < count; ++i) source += (i ? ", v" : "v") + std::to_string(i);
    source += ") { return {";
    for (size_t i = 0; i < count; ++i) {
      for (const char* c = names[i]; *c != '\0'; ++c) {
        if (!word_char(*c)) return nullptr;  // names are identifiers; anything else is set one by one
      }
      source += std::string(i ? ", " : " ") + names[i] + ": v" + std::to_string(i);
    }
    source += " }; })";
    napi_value script, function;
    napi_ref reference;
    if (napi_create_string_utf8(env, source.c_str(), source.size(), &script) != napi_ok ||
        napi_run_script(env, script, &function) != napi_ok ||
        napi_create_reference(env, function, 1, &reference) != napi_ok) {
      clear_pending_exception(env);
      return nullptr;
    }
    cache->makers_.push_back({std::vector<const char*>(names, names + count), reference});
    return function;
  }

  // What reads an object's own string keys (its Object.getOwnPropertyNames) into the
  // environment's key buffer: `function` writes, for o, the keys' bytes each followed by a
  // NUL into `bytes` (at most kOwnNamesBytes), then their count and length into header[0],
  // header[1]; header[0] is -1 where they do not fit or a key is not ASCII or holds a NUL
  // (such an object is read key by key). It runs while `busy` is set: a call that a Proxy
  // trap makes meanwhile reads its options key by key and leaves the buffer alone. No
  // string is made: making one string of the keys (Array.prototype.join) cost 7 us of a
  // cold call, writing the bytes 1.5 us (a call after a 64 MiB sweep, 2026-12-07), and a
  // napi_get_element and a napi_get_value_string_utf8 per key cost ~1,700 x86
  // instructions a key.
  struct OwnNames {
    napi_value function = nullptr;  // nullptr if Node-API failed
    const int32_t* header = nullptr;
    const char* bytes = nullptr;
    bool* busy = nullptr;
  };
  static constexpr size_t kOwnNamesBytes = 2048;
  static OwnNames own_names(napi_env env) {
    KeyCache* cache = of(env);
    OwnNames names;
    if (cache == nullptr) return names;
    if (cache->own_names_ == nullptr && !cache->make_own_names(env)) return names;
    if (napi_get_reference_value(env, cache->own_names_, &names.function) != napi_ok) {
      names.function = nullptr;
      return names;
    }
    names.header = cache->own_names_header_;
    names.bytes = cache->own_names_bytes_;
    names.busy = &cache->own_names_busy_;
    return names;
  }

  // The global object's `name` (a constructor such as "Float32Array", a string literal or
  // static table entry) as it was when first asked for, found on the global object once per
  // environment: the lookup of the global and its property cost ~1,300 x86 instructions a
  // call. nullptr if Node-API fails.
  static napi_value global_constructor(napi_env env, const char* name) {
    KeyCache* cache = of(env);
    if (cache == nullptr) return nullptr;
    napi_value function;
    for (const Constructor& known : cache->constructors_) {
      if (known.name == name || std::strcmp(known.name, name) == 0) {
        return napi_get_reference_value(env, known.function, &function) == napi_ok ? function : nullptr;
      }
    }
    napi_value global;
    napi_valuetype type = napi_undefined;
    napi_ref reference;
    if (napi_get_global(env, &global) != napi_ok ||
        napi_get_named_property(env, global, name, &function) != napi_ok ||
        napi_typeof(env, function, &type) != napi_ok || type != napi_function ||
        napi_create_reference(env, function, 1, &reference) != napi_ok) {
      clear_pending_exception(env);
      return nullptr;
    }
    cache->constructors_.push_back({name, reference});
    return function;
  }

  // This environment's Object.prototype (nullptr if Node-API fails).
  static napi_value object_prototype(napi_env env) {
    KeyCache* cache = of(env);
    napi_value prototype;
    if (cache == nullptr || cache->object_prototype_ == nullptr ||
        napi_get_reference_value(env, cache->object_prototype_, &prototype) != napi_ok) {
      return nullptr;
    }
    return prototype;
  }

 private:
  friend class PerEnvironment<KeyCache>;

  explicit KeyCache(napi_env env) : PerEnvironment(env) {
    napi_value array, object, prototype;
    ok_ = napi_create_array(env, &array) == napi_ok &&
          napi_create_reference(env, array, 1, &array_) == napi_ok;
    // The prototype of `{}`: options objects with it (or none) are read by their own keys.
    if (ok_ && (napi_create_object(env, &object) != napi_ok ||
                napi_get_prototype(env, object, &prototype) != napi_ok ||
                napi_create_reference(env, prototype, 1, &object_prototype_) != napi_ok)) {
      object_prototype_ = nullptr;
    }
  }
  ~KeyCache() {
    for (napi_ref ref : {array_, object_prototype_, own_names_}) {
      if (ref != nullptr) napi_delete_reference(env_, ref);
    }
    for (const Maker& maker : makers_) napi_delete_reference(env_, maker.function);
    for (const Constructor& known : constructors_) napi_delete_reference(env_, known.function);
  }

  napi_value get(napi_value array, const char* name) {
    napi_value key;
    // Names are string literals or static tables (property_key's contract), so the pointer
    // finds them without hashing or comparing the text; a new pointer to a known text is
    // looked up by its text.
    uint32_t slot;
    Recent& recent = recent_[(reinterpret_cast<uintptr_t>(name) >> 3) % kRecent];
    if (recent.name == name) {
      slot = recent.slot;
    } else if (auto known = by_text_.find(std::string_view(name)); known != by_text_.end()) {
      slot = known->second;
      recent = {name, slot};
    } else {
      if (napi_create_string_utf8(env_, name, NAPI_AUTO_LENGTH, &key) != napi_ok) return nullptr;
      slot = static_cast<uint32_t>(names_.size());
      if (napi_set_element(env_, array, slot, key) != napi_ok) return key;
      names_.emplace_back(name);
      by_text_.emplace(names_.back(), slot);
      recent = {name, slot};
      return key;
    }
    return napi_get_element(env_, array, slot, &key) == napi_ok ? key : nullptr;
  }

  bool make_own_names(napi_env env) {
    static constexpr char kSource[] = R"((function (header, bytes) {
      const getOwnPropertyNames = Object.getOwnPropertyNames;
      return function (o) {
        const keys = getOwnPropertyNames(o);
        header[0] = -1;
        let p = 0;
        for (let i = 0; i < keys.length; i++) {
          const key = keys[i];
          if (p + key.length >= bytes.length) return;
          for (let j = 0; j < key.length; j++) {
            const c = key.charCodeAt(j);
            if (c === 0 || c > 127) return;
            bytes[p++] = c;
          }
          bytes[p++] = 0;
        }
        header[1] = p;
        header[0] = keys.length;
      };
    }))";
    napi_value script, maker, buffer, header, bytes, undefined, function;
    void* data = nullptr;
    if (napi_create_string_utf8(env, kSource, sizeof kSource - 1, &script) != napi_ok ||
        napi_run_script(env, script, &maker) != napi_ok ||
        napi_create_arraybuffer(env, 2 * sizeof(int32_t) + kOwnNamesBytes, &data, &buffer) != napi_ok ||
        napi_create_typedarray(env, napi_int32_array, 2, buffer, 0, &header) != napi_ok ||
        napi_create_typedarray(env, napi_uint8_array, kOwnNamesBytes, buffer, 2 * sizeof(int32_t), &bytes) != napi_ok ||
        napi_get_undefined(env, &undefined) != napi_ok) {
      clear_pending_exception(env);
      return false;
    }
    napi_value arguments[] = {header, bytes};
    if (napi_call_function(env, undefined, maker, 2, arguments, &function) != napi_ok ||
        napi_create_reference(env, function, 1, &own_names_) != napi_ok) {
      clear_pending_exception(env);
      own_names_ = nullptr;
      return false;
    }
    // The closure holds the buffer (nothing else can reach it to detach it), and the
    // reference the closure: its memory lives as long as this cache.
    own_names_header_ = static_cast<int32_t*>(data);
    own_names_bytes_ = static_cast<const char*>(data) + 2 * sizeof(int32_t);
    return true;
  }

  napi_ref array_ = nullptr;
  napi_ref object_prototype_ = nullptr;
  napi_ref own_names_ = nullptr;
  const int32_t* own_names_header_ = nullptr;
  const char* own_names_bytes_ = nullptr;
  bool own_names_busy_ = false;
  struct Maker {
    std::vector<const char*> names;
    napi_ref function;
  };
  std::vector<Maker> makers_;
  struct Constructor {
    const char* name;
    napi_ref function;
  };
  std::vector<Constructor> constructors_;

  std::deque<std::string> names_;  // by slot; stable storage for the views in by_text_
  std::unordered_map<std::string_view, uint32_t> by_text_;
  // The last name pointer seen in each of kRecent direct-mapped entries.
  struct Recent {
    const char* name = nullptr;
    uint32_t slot = 0;
  };
  static constexpr size_t kRecent = 512;
  static constexpr size_t kMostMakers = 64;
  Recent recent_[kRecent];
};

}  // namespace

napi_value property_key(Napi::Env env, const char* name) { return KeyCache::key(env, name); }

double NativeClock::seconds(clockid_t clock) {
  timespec t;
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

Napi::Object result_object(Napi::Env env, napi_property_descriptor* properties, size_t count) {
  if (count > kMostResultProperties) throw Napi::Error::New(env, "tirl: internal error: a result of too many properties");
  const char* names[kMostResultProperties];
  napi_value keys[kMostResultProperties];
  for (size_t i = 0; i < count; ++i) names[i] = properties[i].utf8name;
  if (napi_value maker = KeyCache::object_maker(env, names, count)) {
    napi_value values[kMostResultProperties], undefined, object;
    for (size_t i = 0; i < count; ++i) values[i] = properties[i].value;
    if (napi_get_undefined(env, &undefined) == napi_ok &&
        napi_call_function(env, undefined, maker, count, values, &object) == napi_ok) {
      return Napi::Object(env, object);
    }
    throw Napi::Error::New(env);
  }
  KeyCache::keys(env, names, count, keys);
  for (size_t i = 0; i < count; ++i) {
    if (keys[i] != nullptr) {  // else the descriptor makes the key from utf8name
      properties[i].name = keys[i];
      properties[i].utf8name = nullptr;
    }
  }
  Napi::Object object = Napi::Object::New(env);
  if (napi_define_properties(env, object, count, properties) != napi_ok) {
    throw Napi::Error::New(env);
  }
  return object;
}

namespace {

std::string format_number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.17g", value);
  return buffer;
}

}  // namespace

std::string describe(Napi::Value value) {
  if (value.IsUndefined()) return "undefined";
  DeviceArrayInfo device_array;
  if (read_device_array(value.Env(), value, &device_array)) {
    return std::string(device_array.freed ? "a freed" : "a") + " DeviceArray of " +
           dtype_name(device_array.dtype) + " of length " + std::to_string(device_array.length) +
           " on cuda:" + std::to_string(device_array.device.index);
  }
  if (value.IsNull()) return "null";
  if (value.IsNumber()) return "the number " + format_number(value.As<Napi::Number>().DoubleValue());
  if (value.IsBoolean()) return value.As<Napi::Boolean>().Value() ? "true" : "false";
  if (value.IsString()) return "a string";
  if (value.IsBigInt()) return "a bigint";
  if (value.IsSymbol()) return "a symbol";
  if (value.IsFunction()) return "a function";
  if (value.IsTypedArray()) {
    Napi::TypedArray array = value.As<Napi::TypedArray>();
    return std::string("a ") + typed_array_name(array.TypedArrayType()) + " of length " +
           std::to_string(array.ElementLength());
  }
  if (value.IsArray()) {
    return "an Array of length " + std::to_string(value.As<Napi::Array>().Length());
  }
  if (value.IsArrayBuffer()) return "an ArrayBuffer";
  if (value.IsDataView()) return "a DataView";
  if (value.IsPromise()) return "a Promise";
  return "an object";
}

Napi::Value new_typed_array(Napi::Env env, const char* type, int64_t length, const char* who,
                            const std::string& what) {
  try {
    const napi_value size = Napi::Number::New(env, static_cast<double>(length));
    if (napi_value constructor = KeyCache::global_constructor(env, type)) {
      napi_value array;
      if (napi_new_instance(env, constructor, 1, &size, &array) != napi_ok) throw Napi::Error::New(env);
      return Napi::Value(env, array);
    }
    return env.Global().Get(type).As<Napi::Function>().New({size});
  } catch (const Napi::Error& e) {
    throw Napi::RangeError::New(env, std::string(who) + ": could not allocate " + what + " (a " + type +
                                         " of length " + std::to_string(length) + "): " + e.Message());
  }
}

namespace {

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// "oldLogp" -> "old_logp": the C name a JavaScript key stands for.
std::string snake_case(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (std::isupper(static_cast<unsigned char>(c))) {
      out += '_';
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      out += c;
    }
  }
  return out;
}

constexpr const char* kNull = "but received NULL";

bool ends_with(const std::string& text, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return text.size() >= n && text.compare(text.size() - n, n, suffix) == 0;
}

}  // namespace

std::string javascript_message(const std::string& message, const NameMap& names) {
  std::string out;
  size_t i = 0;
  while (i < message.size()) {
    if (!word_char(message[i])) {
      out += message[i++];
      continue;
    }
    size_t end = i;
    while (end < message.size() && word_char(message[end])) ++end;
    const std::string word = message.substr(i, end - i);
    const std::string* js = nullptr;
    for (const auto& [c_name, js_name] : names) {
      if (c_name == word) {
        js = &js_name;
        break;
      }
    }
    out += js != nullptr ? *js : word;
    i = end;
  }
  if (ends_with(out, kNull)) out.replace(out.size() - 4, 4, "undefined");
  return out;
}

Napi::Error status_error(Napi::Env env, tirl_status status, const std::string& message,
                         const NameMap& names) {
  std::string text = message.empty() ? std::string("tirl: ") + status_name(status)
                                     : javascript_message(message, names);
  // An array an option needs but the call lacks is a missing argument: a TypeError.
  const bool absent = status == TIRL_ERROR_INVALID_ARGUMENT && ends_with(message, kNull);
  Napi::Error error = absent ? Napi::TypeError::New(env, text)
                      : status == TIRL_ERROR_INVALID_ARGUMENT ? Napi::RangeError::New(env, text)
                                                              : Napi::Error::New(env, text);
  error.Set("code", Napi::String::New(env, status_name(status)));
  return error;
}

napi_value queue_async_work(napi_env env, napi_async_execute_callback execute,
                            napi_async_complete_callback complete, void* data,
                            napi_async_work* work, napi_deferred* deferred) {
  // A fresh one-byte string: cheaper than the key cache's lookup of an internalised one.
  napi_value name;
  NAPI_THROW_IF_FAILED(env, napi_create_string_latin1(env, "tirl", 4, &name), nullptr);
  NAPI_THROW_IF_FAILED(env, napi_create_async_work(env, nullptr, name, execute, complete, data, work), nullptr);
  napi_value promise = nullptr;
  napi_status status = napi_create_promise(env, deferred, &promise);
  if (status == napi_ok) {
    status = napi_queue_async_work(env, *work);
    if (status != napi_ok) {
      napi_value undefined;
      napi_get_undefined(env, &undefined);
      napi_resolve_deferred(env, *deferred, undefined);  // frees it; no one holds the Promise
    }
  }
  if (status != napi_ok) {
    napi_delete_async_work(env, *work);
    *work = nullptr;
    NAPI_THROW_IF_FAILED(env, status, nullptr);
  }
  return promise;
}

Napi::Value rejected_promise(Napi::Env env, const Napi::Error& error) {
  Napi::Promise::Deferred deferred = Napi::Promise::Deferred::New(env);
  deferred.Reject(error.Value());
  return deferred.Promise();
}

namespace {

// An environment's async calls that ran at once (settle_soon), oldest first, and the two
// functions that settle them: queueMicrotask, and settle_oldest, which each settle_soon
// queues once. Microtasks run in the order they were queued, so the oldest pending call is
// always the one a settle_oldest is for.
class SoonQueue : public PerEnvironment<SoonQueue> {
 public:
  // Queues the microtask that settles `work`; false (work untouched) if it cannot.
  bool push(std::unique_ptr<SettleSoon>& work) {
    napi_value queue_microtask, settle, global;
    if (napi_get_reference_value(env_, queue_microtask_, &queue_microtask) != napi_ok ||
        napi_get_reference_value(env_, settle_oldest_, &settle) != napi_ok ||
        napi_get_global(env_, &global) != napi_ok ||
        napi_call_function(env_, global, queue_microtask, 1, &settle, nullptr) != napi_ok) {
      return false;
    }
    pending_.push_back(std::move(work));
    return true;
  }

 private:
  friend class PerEnvironment<SoonQueue>;

  explicit SoonQueue(napi_env env) : PerEnvironment(env) {
    napi_value global, queue_microtask, settle;
    ok_ = napi_get_global(env, &global) == napi_ok &&
          napi_get_named_property(env, global, "queueMicrotask", &queue_microtask) == napi_ok &&
          napi_create_reference(env, queue_microtask, 1, &queue_microtask_) == napi_ok &&
          napi_create_function(env, "settle", NAPI_AUTO_LENGTH, &settle_oldest, this, &settle) == napi_ok &&
          napi_create_reference(env, settle, 1, &settle_oldest_) == napi_ok;
  }

  static napi_value settle_oldest(napi_env env, napi_callback_info info) {
    void* data = nullptr;
    if (napi_get_cb_info(env, info, nullptr, nullptr, nullptr, &data) != napi_ok) return nullptr;
    auto* self = static_cast<SoonQueue*>(data);
    if (self->pending_.empty()) return nullptr;
    std::unique_ptr<SettleSoon> work = std::move(self->pending_.front());
    self->pending_.pop_front();
    try {
      work->settle_now();
    } catch (...) {
      // Out of memory while making the result: nothing may escape into the microtask.
    }
    return nullptr;
  }

  // With its environment: the pending calls are dropped unsettled, no JavaScript being
  // left to see them.
  ~SoonQueue() {
    pending_.clear();
    for (napi_ref ref : {queue_microtask_, settle_oldest_}) {
      if (ref != nullptr) napi_delete_reference(env_, ref);
    }
  }

  napi_ref queue_microtask_ = nullptr;
  napi_ref settle_oldest_ = nullptr;
  std::deque<std::unique_ptr<SettleSoon>> pending_;
};

}  // namespace

void settle_soon(Napi::Env env, std::unique_ptr<SettleSoon> work) {
  SoonQueue* queue = SoonQueue::of(env);
  if (queue == nullptr || !queue->push(work)) work->settle_now();
}

void HostSnapshot::Release::operator()(uint8_t* memory) const { copy_memory().give(memory, capacity); }

void* HostSnapshot::stage(Napi::Env env, const char* op, napi_value array, void* data,
                          napi_value buffer, size_t offset, size_t bytes, const std::string& label,
                          const char* output_type, int64_t output_length) {
  bool ordinary = false;
  void* base = nullptr;
  size_t buffer_length = 0;
  if (napi_is_arraybuffer(env, buffer, &ordinary) != napi_ok) {
    throw Napi::TypeError::New(env, "tirl: could not read " + label);
  }
  // A SharedArrayBuffer cannot be detached or shrunk: the kernel uses it in place.
  if (!ordinary || bytes == 0) return data;
  if (napi_get_arraybuffer_info(env, buffer, &base, &buffer_length) != napi_ok ||
      offset + bytes > buffer_length) {
    throw Napi::TypeError::New(env, "tirl: could not read " + label);
  }
  const auto* original = static_cast<const uint8_t*>(base);
  BufferCopy* copy = nullptr;
  for (BufferCopy& b : buffers_) {
    if (b.original == original && b.length == buffer_length) copy = &b;
  }
  if (copy == nullptr) {
    size_t capacity = 0;
    uint8_t* memory = nullptr;
    try {
      memory = copy_memory().take(buffer_length, &capacity);
    } catch (const std::bad_alloc&) {
      throw Napi::RangeError::New(env, std::string(op) + ": could not allocate the async call's copy of " +
                                           label + " (" + std::to_string(buffer_length) +
                                           " bytes, its whole buffer): out of memory");
    }
    if (buffers_.empty()) buffers_.reserve(8);  // a call's usual arrays, one allocation
    buffers_.push_back(BufferCopy{original, buffer_length,
                                  std::unique_ptr<uint8_t, Release>(memory, Release{capacity}),
                                  {0, 0}, {}});
    copy = &buffers_.back();
  }
  uint8_t* staged = copy->memory.get() + offset;
  const std::pair<size_t, size_t> range{offset, bytes};
  if (!copy->filled(range)) {
    copy_bytes(staged, original + offset, bytes);
    if (copy->first.second == 0) {
      copy->first = range;
    } else {
      copy->more.push_back(range);
    }
  }
  if (output_type != nullptr) {
    if (outputs_.empty()) outputs_.reserve(4);
    // Referenced as an object: a Napi::TypedArray would ask Node-API for its info again.
    outputs_.push_back(Output{Napi::Reference<Napi::Object>::New(Napi::Object(env, array), 1), staged, bytes, label,
                              output_type, output_length});
  }
  return staged;
}

bool HostSnapshot::BufferCopy::filled(std::pair<size_t, size_t> range) const {
  return first == range || std::find(more.begin(), more.end(), range) != more.end();
}

std::string HostSnapshot::copy_back(Napi::Env env, const char* op) {
  // Every output is checked before any is written: an op's outputs are all or none.
  constexpr size_t kInline = 8;
  uint8_t* inline_targets[kInline];
  std::vector<uint8_t*> more_targets;
  if (outputs_.size() > kInline) more_targets.resize(outputs_.size());
  uint8_t** targets = outputs_.size() > kInline ? more_targets.data() : inline_targets;
  for (size_t i = 0; i < outputs_.size(); ++i) {
    const Output& output = outputs_[i];
    napi_typedarray_type type;
    size_t length = 0;
    void* data = nullptr;
    napi_value buffer;
    size_t offset = 0;
    bool detached = true;
    if (napi_get_typedarray_info(env, output.array.Value(), &type, &length, &data, &buffer, &offset) != napi_ok ||
        napi_is_detached_arraybuffer(env, buffer, &detached) != napi_ok || detached ||
        static_cast<int64_t>(length) != output.length) {
      return std::string(op) + ": Expected " + a_type_name(output.type) + " of length " +
             std::to_string(output.length) + " for " + output.label + " but received one whose buffer was " +
             (detached ? "detached" : "resized") + " before the call settled";
    }
    targets[i] = static_cast<uint8_t*>(data);
  }
  for (size_t i = 0; i < outputs_.size(); ++i) {
    copy_bytes(targets[i], outputs_[i].result, outputs_[i].bytes);
  }
  return "";
}

Options::Options(const Napi::CallbackInfo& info, const char* op) : env_(info.Env()), op_(op) {
  Napi::Value first = info.Length() > 0 ? info[0] : env_.Undefined();
  // One typeof (a function is not napi_object), then the two kinds of object refused.
  napi_valuetype type = napi_undefined;
  bool array = false, typed_array = false;
  if (napi_typeof(env_, first, &type) != napi_ok || type != napi_object ||
      napi_is_array(env_, first, &array) != napi_ok || array ||
      napi_is_typedarray(env_, first, &typed_array) != napi_ok || typed_array) {
    type_error("an options object", "the first argument", first);
  }
  object_ = first.As<Napi::Object>();
  // One allocation each for a call's usual sizes (ppoLoss reads ~45 keys, up to 8 arrays).
  known_keys_.reserve(64);
  inputs_.reserve(8);
  read_arrays_.reserve(8);
  snapshot_own_keys();
}

Options::Options(const Napi::CallbackInfo& info, const char* op, const char* const* keys, size_t count)
    : env_(info.Env()), op_(op), positional_keys_(keys), positional_count_(count) {
  if (info.Length() > count) {
    std::string names;
    for (size_t i = 0; i < count; ++i) names += std::string(i == 0 ? "" : ", ") + keys[i];
    throw Napi::TypeError::New(env_, std::string(op_) + ": Expected at most " + std::to_string(count) +
                                         " arguments (" + names + ") but received " +
                                         std::to_string(info.Length()));
  }
  for (size_t i = 0; i < info.Length(); ++i) positional_[i] = info[i];  // the rest stay nullptr
  known_keys_.reserve(16);
  inputs_.reserve(count);
  read_arrays_.reserve(count);
}

void Options::snapshot_own_keys() {
  napi_value prototype, null_value;
  bool plain = false, is_null = false;
  const napi_value object_prototype = KeyCache::object_prototype(env_);
  if (object_prototype == nullptr || napi_get_prototype(env_, object_, &prototype) != napi_ok ||
      (napi_strict_equals(env_, prototype, object_prototype, &plain) != napi_ok) ||
      (!plain && (napi_get_null(env_, &null_value) != napi_ok ||
                  napi_strict_equals(env_, prototype, null_value, &is_null) != napi_ok || !is_null))) {
    return;  // read key by key
  }
  const KeyCache::OwnNames names = KeyCache::own_names(env_);
  napi_value undefined, argument = object_, ignored;
  if (names.function == nullptr || *names.busy || napi_get_undefined(env_, &undefined) != napi_ok) {
    return;  // read key by key
  }
  *names.busy = true;
  const napi_status status = napi_call_function(env_, undefined, names.function, 1, &argument, &ignored);
  *names.busy = false;
  if (status != napi_ok) throw Napi::Error::New(env_);  // a Proxy's ownKeys trap threw: its exception is pending
  const int32_t count = names.header[0], length = names.header[1];
  if (count < 0 || length < 0 || static_cast<size_t>(length) > KeyCache::kOwnNamesBytes ||
      (length > 0 && names.bytes[length - 1] != '\0')) {
    return;  // keys that do not fit, or not ASCII: read key by key
  }
  // A copy: a getter may call an op, which writes the environment's buffer again.
  char* own = own_names_inline_;
  if (static_cast<size_t>(length) > sizeof own_names_inline_) {
    own_names_long_.resize(static_cast<size_t>(length));
    own = own_names_long_.data();
  }
  std::memcpy(own, names.bytes, static_cast<size_t>(length));
  own_keys_.reserve(static_cast<size_t>(count));
  for (char* key = own, *end = own + length; key < end; key += std::strlen(key) + 1) {
    const uint64_t bit = own_key_bit(key);
    own_keys_.push_back({key, bit, false});
    own_key_bits_ |= bit;
  }
  if (own_keys_.size() != static_cast<size_t>(count)) {
    own_keys_.clear();
    own_key_bits_ = 0;
    return;
  }
  plain_ = true;
}

Options::OwnKey* Options::own_key(const char* name) {
  const uint64_t bit = own_key_bit(name);
  if ((own_key_bits_ & bit) == 0) return nullptr;
  for (OwnKey& own : own_keys_) {
    if (own.bit == bit && std::strcmp(own.text, name) == 0) return &own;
  }
  return nullptr;
}

bool Options::lookup_key(const char* name, Napi::Value* value) {
  known_keys_.push_back(name);  // repeats are harmless; names() and messages drop them
  if (positional_keys_ != nullptr) {
    // The same literal is usually the same pointer (one pass without comparing any text);
    // the text decides otherwise. An argument not passed is absent, as one not an array.
    size_t i = 0;
    while (i < positional_count_ && positional_keys_[i] != name) ++i;
    if (i == positional_count_) {
      i = 0;
      while (i < positional_count_ && std::strcmp(positional_keys_[i], name) != 0) ++i;
    }
    if (i == positional_count_ || positional_[i] == nullptr) return false;
    *value = Napi::Value(env_, positional_[i]);
    return true;
  }
  napi_value raw;
  if (plain_) {
    OwnKey* own = own_key(name);
    if (own == nullptr) return false;  // no Node-API call for an absent option
    own->read = true;
    if (napi_get_named_property(env_, object_, own->text, &raw) != napi_ok) {
      throw Napi::Error::New(env_);  // a getter threw: its exception is pending
    }
  } else if (napi_value key = property_key(env_, name)) {
    if (napi_get_property(env_, object_, key, &raw) != napi_ok) throw Napi::Error::New(env_);
  } else {
    raw = object_.Get(name);
  }
  *value = Napi::Value(env_, raw);
  return true;
}

Napi::Value Options::field(const char* name) {
  Napi::Value value;
  return present(name, &value) ? value : env_.Undefined();
}

bool Options::known(std::string_view key) const {
  for (const char* k : known_keys_) {
    if (key == k) return true;
  }
  return false;
}

void Options::allow(const char* name) { known_keys_.push_back(name); }

void Options::refuse(const char* name, const std::string& because) {
  Napi::Value value;
  if (!present(name, &value)) return;
  throw Napi::TypeError::New(env_, std::string(op_) + ": Expected no " + name + " (" + because +
                                       ") but received " + describe(value));
}

void Options::check_unknown_keys() {
  if (positional_keys_ != nullptr) return;  // no keys: the constructor checked the arity
  if (plain_) {
    for (const OwnKey& own : own_keys_) {
      if (own.read || known(own.text)) continue;
      napi_value value;
      if (napi_get_named_property(env_, object_, own.text, &value) != napi_ok) throw Napi::Error::New(env_);
      if (Napi::Value(env_, value).IsUndefined()) continue;  // as good as absent
      unknown_key(own.text, Napi::Value(env_, value));
    }
    return;
  }
  napi_value keys;
  if (napi_get_all_property_names(env_, object_, napi_key_own_only,
                                  static_cast<napi_key_filter>(napi_key_enumerable |
                                                               napi_key_skip_symbols),
                                  napi_key_numbers_to_strings, &keys) != napi_ok) {
    throw Napi::TypeError::New(env_, std::string(op_) + ": could not read the option keys");
  }
  Napi::Array list(env_, keys);
  const uint32_t count = list.Length();
  for (uint32_t i = 0; i < count; ++i) {
    Napi::Value name = list.Get(i);
    char buffer[64];
    size_t length = 0;
    if (napi_get_value_string_utf8(env_, name, buffer, sizeof buffer, &length) == napi_ok &&
        length + 1 < sizeof buffer && known(std::string_view(buffer, length))) {
      continue;  // the common case, with no allocation
    }
    const std::string key = name.As<Napi::String>().Utf8Value();
    if (known(key)) continue;
    // By the key itself: its UTF-8 may hold a NUL, where a C string would stop.
    napi_value value;
    if (napi_get_property(env_, object_, name, &value) != napi_ok) throw Napi::Error::New(env_);
    if (Napi::Value(env_, value).IsUndefined()) continue;  // as good as absent
    unknown_key(key, Napi::Value(env_, value));
  }
}

void Options::unknown_key(const std::string& key, Napi::Value value) {
  std::string known;
  for (const std::string& k : unique_keys()) known += (known.empty() ? "" : ", ") + k;
  const std::string reads = inherited_ != nullptr
                                ? std::string("a prepared ") + op_ + " takes only its arrays: " + known
                                : std::string(op_) + " reads " + known;
  throw Napi::TypeError::New(env_, std::string(op_) + ": Expected no option named '" + key +
                                       "' (" + reads + ") but received " + describe(value));
}

void Options::name_as(const char* c_name, const std::string& js_name) {
  aliases_.emplace_back(c_name, js_name);
}

namespace {

std::vector<std::string> unique(const std::vector<const char*>& keys) {
  std::vector<std::string> list;
  for (const char* k : keys) {
    if (std::find(list.begin(), list.end(), k) == list.end()) list.emplace_back(k);
  }
  return list;
}

}  // namespace

std::vector<std::string> Options::unique_keys() const { return unique(known_keys_); }

NameMap NameSource::names() const {
  NameMap names = aliases;
  for (const std::string& key : unique(keys)) {
    const std::string c_name = snake_case(key);
    if (c_name != key) names.emplace_back(c_name, key);
  }
  return names;
}

NameSource Options::with_inherited(NameSource source) const {
  if (inherited_ != nullptr) {
    source.aliases.insert(source.aliases.end(), inherited_->aliases.begin(), inherited_->aliases.end());
    source.keys.insert(source.keys.end(), inherited_->keys.begin(), inherited_->keys.end());
  }
  return source;
}

NameSource Options::name_source() const { return with_inherited({aliases_, known_keys_}); }

NameSource Options::take_name_source() {
  return with_inherited({std::move(aliases_), std::move(known_keys_)});
}

NameMap Options::names() const { return name_source().names(); }

bool Options::has(const char* name) {
  Napi::Value value;
  return present(name, &value);
}

void Options::type_error(const std::string& expected, const std::string& name, Napi::Value value) {
  throw Napi::TypeError::New(env_, std::string(op_) + ": Expected " + expected + " for " + name +
                                       " but received " + describe(value));
}

void Options::range_error(const std::string& message) {
  throw Napi::RangeError::New(env_, message);
}

void Options::check_typed_array(Napi::Value value, bool typed_array, const std::string& label,
                                napi_typedarray_type kind, const char* type_name, void** data,
                                size_t* length, napi_value* buffer_out, size_t* offset) {
  // The message's "a Float32Array" is made only for an error.
  const auto expected = [&] { return expected_text({{}, type_name, "", false, nullptr, 0}); };
  if (!typed_array) type_error(expected(), label, value);
  napi_typedarray_type type;
  napi_value buffer;
  if (napi_get_typedarray_info(env_, value, &type, length, data, &buffer, offset) != napi_ok) {
    throw Napi::TypeError::New(env_, std::string(op_) + ": could not read " + label);
  }
  if (type != kind) type_error(expected(), label, value);
  // V8 gives a detached buffer's arrays length 0: only an empty array can be one.
  bool detached = false;
  if (*length == 0 && (napi_is_detached_arraybuffer(env_, buffer, &detached) != napi_ok || detached)) {
    throw Napi::TypeError::New(env_, std::string(op_) + ": Expected " + expected() + " for " +
                                         label + " but received one whose buffer is detached");
  }
  *buffer_out = buffer;
}

std::string a_type_name(const char* type_name) {
  return std::string(type_name[0] == 'I' ? "an " : "a ") + type_name;
}

std::string Options::expected_text(const ReadArray& read) const {
  std::string text = a_type_name(read.type_name);
  if (device_arrays_allowed_ && read.on_device) {
    text += std::string(" or a DeviceArray of ") + read.device_dtypes;
  }
  return text;
}

void Options::place(tirl_device device, const std::string& label, Napi::Value value) {
  if (placed_by_.empty()) {
    device_ = device;
    placed_by_ = label;
    return;
  }
  if (device.type != device_.type || device.index != device_.index) {
    const std::string where = device_.type == TIRL_DEVICE_CUDA
                                  ? "a DeviceArray on cuda:" + std::to_string(device_.index)
                                  : "a typed array in host memory";
    throw Napi::TypeError::New(env_, std::string(op_) + ": Expected " + where + " for " + label +
                                         " (like " + placed_by_ + ") but received " +
                                         describe(value));
  }
}

void Options::verify_not_detached() {
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const Napi::Value& value = inputs_[i];
    const ReadArray& read = read_arrays_[i];
    // The same object: a DeviceArray stays one, a typed array stays one.
    const bool is_device_array = read.on_device;
    bool changed;
    if (is_device_array) {
      DeviceArrayInfo device_array;
      changed = !read_device_array(env_, value, &device_array) || device_array.freed;
    } else {
      // A non-empty array is asked for its length only: detaching its buffer (transfer
      // included) makes it 0 and a resize changes it, and nothing else can move its memory
      // (check_typed_array's read moved a small array's elements off V8's heap for good; a
      // resizable buffer resizes in place), while asking for the memory costs V8 the
      // buffer's handle. An empty array (whose length a detach leaves at 0) is asked whether
      // its buffer is detached.
      size_t length = 0;
      if (read.length != 0) {
        changed = napi_get_typedarray_info(env_, value, nullptr, &length, nullptr, nullptr, nullptr) !=
                      napi_ok ||
                  static_cast<int64_t>(length) != read.length;
      } else {
        bool detached = false;
        napi_typedarray_type type;
        void* data = nullptr;
        napi_value buffer;
        size_t offset = 0;
        changed = napi_get_typedarray_info(env_, value, &type, &length, &data, &buffer, &offset) !=
                      napi_ok ||
                  data != read.data || length != 0 ||
                  napi_is_detached_arraybuffer(env_, buffer, &detached) != napi_ok || detached;
      }
    }
    if (changed) {
      throw Napi::TypeError::New(
          env_, std::string(op_) + ": Expected " + expected_text(read) + " for " + read.label +
                    " but received one whose " +
                    (is_device_array ? "memory was freed" : "buffer was detached or resized") +
                    " while the options were being read");
    }
  }
}

Napi::Value Options::member_of(Napi::Object object, const char* name) {
  // By its UTF-8 name, as present() reads an option: the cached key's lookup costs more.
  napi_value value;
  if (napi_get_named_property(env_, object, name, &value) != napi_ok) throw Napi::Error::New(env_);
  return Napi::Value(env_, value);
}

Napi::Object Options::out_object() {
  // Read once a call, however many outputs it has: each read of a cold call costs ~1 us.
  if (!out_read_) {
    Napi::Value out;
    out_read_ = true;
    if (!present("out", &out)) return Napi::Object();
    if (!out.IsObject() || out.IsArray() || out.IsTypedArray()) {
      type_error("an object of output arrays", "out", out);
    }
    out_ = out;
  }
  return out_ == nullptr ? Napi::Object() : Napi::Object(env_, out_);
}

double Options::number(const char* name, double fallback) {
  Napi::Value value;
  if (!present(name, &value)) return fallback;
  return number_of(name, value, fallback);
}

double Options::number_of(const char* name, Napi::Value value, double fallback) {
  if (value.IsUndefined()) return fallback;
  if (!value.IsNumber()) type_error("a number", name, value);
  return value.As<Napi::Number>().DoubleValue();
}

double Options::unless_zero(const char* name, double fallback) {
  Napi::Value value;
  if (!present(name, &value)) return fallback;
  const double number = number_of(name, value, fallback);
  if (number == 0) {
    range_error(std::string(op_) + ": Expected a number other than 0 for " + name +
                " (0 is the C ABI's 'not set': leave " + name + " out) but received 0");
  }
  return number;
}

double Options::required_number(const char* name) {
  Napi::Value value = field(name);
  if (!value.IsNumber()) type_error("a number", name, value);
  return value.As<Napi::Number>().DoubleValue();
}

int64_t Options::integer(const char* name, int64_t fallback, int64_t min, int64_t max) {
  Napi::Value value;
  if (!present(name, &value)) return fallback;
  double number = number_of(name, value, 0);
  if (number != std::floor(number) || number < static_cast<double>(min) ||
      number > static_cast<double>(max)) {
    range_error(std::string(op_) + ": Expected an integer in [" + std::to_string(min) + ", " +
                std::to_string(max) + "] for " + name + " but received " + describe(value));
  }
  return static_cast<int64_t>(number);
}

bool Options::boolean(const char* name, bool fallback) {
  Napi::Value value;
  if (!present(name, &value)) return fallback;
  if (!value.IsBoolean()) type_error("a boolean", name, value);
  return value.As<Napi::Boolean>().Value();
}

int Options::choice(const char* name, std::initializer_list<const char*> choices, int fallback) {
  Napi::Value value;
  if (!present(name, &value)) return fallback;
  const auto list = [&] {
    std::string text;
    for (const char* c : choices) text += (text.empty() ? "'" : ", '") + std::string(c) + "'";
    return text;
  };
  if (!value.IsString()) type_error("one of " + list(), name, value);
  char buffer[64];
  size_t length = 0;
  std::string text;
  if (napi_get_value_string_utf8(env_, value, buffer, sizeof buffer, &length) == napi_ok &&
      length + 1 < sizeof buffer) {
    text.assign(buffer, length);  // choices are short: no allocation
  } else {
    text = value.As<Napi::String>().Utf8Value();
  }
  int index = 0;
  for (const char* c : choices) {
    if (text == c) return index;
    ++index;
  }
  const std::string list_text = list();
  throw Napi::RangeError::New(env_, std::string(op_) + ": Expected one of " + list_text +
                                        " for " + name + " but received '" + text + "'");
}

std::vector<std::string> Options::string_list(const char* name) {
  Napi::Value value;
  std::vector<std::string> items;
  if (!present(name, &value)) return items;
  // verl: [item.strip() for item in text.split(",") if item.strip()]
  const auto add_items = [&](const std::string& text) {
    size_t start = 0;
    while (start <= text.size()) {
      const size_t comma = std::min(text.find(',', start), text.size());
      const std::string item = text.substr(start, comma - start);
      const size_t first = item.find_first_not_of(" \t");
      if (first != std::string::npos) {
        items.push_back(item.substr(first, item.find_last_not_of(" \t") - first + 1));
      }
      start = comma + 1;
    }
  };
  if (value.IsString()) {
    add_items(value.As<Napi::String>().Utf8Value());
    return items;
  }
  if (!value.IsArray()) type_error("a string or an array of strings", name, value);
  Napi::Array array = value.As<Napi::Array>();
  const uint32_t length = array.Length();
  for (uint32_t i = 0; i < length; ++i) {
    Napi::Value item = array.Get(i);
    if (!item.IsString()) {
      type_error("a string", std::string(name) + "[" + std::to_string(i) + "]", item);
    }
    items.push_back(item.As<Napi::String>().Utf8Value());
  }
  return items;
}

std::vector<double> Options::number_list(const char* name) {
  Napi::Value value;
  std::vector<double> numbers;
  if (!present(name, &value)) return numbers;
  const auto read = [&](Napi::Value item, const std::string& label) {
    if (!item.IsNumber()) type_error("a number", label, item);
    const double number = item.As<Napi::Number>().DoubleValue();
    if (!std::isfinite(number)) {
      range_error(std::string(op_) + ": Expected a finite number for " + label +
                  " but received " + describe(item));
    }
    numbers.push_back(number);
  };
  if (value.IsNumber()) {
    read(value, name);
    return numbers;
  }
  if (!value.IsArray()) type_error("a number or an array of numbers", name, value);
  Napi::Array array = value.As<Napi::Array>();
  const uint32_t length = array.Length();
  for (uint32_t i = 0; i < length; ++i) {
    read(array.Get(i), std::string(name) + "[" + std::to_string(i) + "]");
  }
  return numbers;
}

void Options::require(bool ok, const char* name, const std::string& expected, double value) {
  if (!ok) {
    range_error(std::string(op_) + ": Expected " + expected + " for " + name + " but received " +
                format_number(value));
  }
}

}  // namespace tirl::binding
