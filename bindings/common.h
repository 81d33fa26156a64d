// The addon's translation layer, and the template that gives every op its sync and async
// (Promise) forms. Bindings only translate: they check JavaScript types, lengths and option
// keys, pass every value through to the C ABI, whose one validation layer (native/src/api/)
// decides its range, and wrap results. Every message has one shape:
//   "<op>: Expected <what> for <name> but received <description>"
// The core's messages name C arguments (clip_low, seq_offsets[2]); the binding puts the
// JavaScript names in their place (clipLow, seqOffsets[2]): each option key it read stands
// for its snake_case form, and an op names the exceptions (name_as).
#pragma once

#include <napi.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "api/op_names.h"
#include "device_array.h"
#include "tirl/tirl.h"

namespace tirl::binding {

// "undefined", "null", "the number 1.5", "a string", "a Float64Array of length 3", ...
std::string describe(Napi::Value value);

// A typed array type with its article: "a Float32Array", "an Int32Array".
std::string a_type_name(const char* type_name);

// A zeroed typed array from JavaScript's own constructor (`type`, e.g. "Float32Array", a
// string literal: the constructor is looked up once per environment): memory that cannot be
// had is then a RangeError "<who>: could not allocate <what> (a <type> of length <n>): Array
// buffer allocation failed", where napi_create_arraybuffer would abort the process.
Napi::Value new_typed_array(Napi::Env env, const char* type, int64_t length, const char* who,
                            const std::string& what);

// `name` (a string literal or static table entry: it must outlive the environment's calls)
// as a property key, made once per environment; nullptr where Node-API fails.
napi_value property_key(Napi::Env env, const char* name);

// An object of `count` properties (their utf8name and value), made by one call of a
// JavaScript object literal compiled once per list of names (KeyCache::object_maker);
// napi_define_properties with cached keys where the names are not identifiers. Setting
// the properties one by one through Node-API walked V8's shape transitions a property at a
// time: about 1,800 x86 instructions each, and 15 us of a cold 1,024-element dpoLoss call
// of 49 us (its six properties, 2026-12-07). At most kMostResultProperties.
constexpr size_t kMostResultProperties = 256;
Napi::Object result_object(Napi::Env env, napi_property_descriptor* properties, size_t count);

// An op's result object, built by result_object. Names are string literals or static table
// entries (property_key's contract: the maker of a list of names is found by its pointers).
//   ResultObject r(env); r.add("loss", 0.5); r.add("grad", array); return r.done();
template <size_t kMost = 16>
class ResultObject {
  static_assert(kMost <= kMostResultProperties, "a result of too many properties");

 public:
  explicit ResultObject(Napi::Env env) : env_(env) {}
  void add(const char* name, Napi::Value value) {
    if (count_ == kMost) throw Napi::Error::New(env_, "tirl: internal error: a result of too many properties");
    properties_[count_++] = {name, nullptr, nullptr, nullptr, nullptr, value, napi_default_jsproperty, nullptr};
  }
  void add(const char* name, double number) { add(name, Napi::Number::New(env_, number)); }
  Napi::Object done() { return result_object(env_, properties_, count_); }

 private:
  Napi::Env env_;
  napi_property_descriptor properties_[kMost];
  size_t count_ = 0;
};

// C argument names and the JavaScript names that stand for them in messages.
using NameMap = std::vector<std::pair<std::string, std::string>>;

// The core's message with the JavaScript names of `names` in place of the C names (whole
// words only), and NULL (an absent array) as undefined.
std::string javascript_message(const std::string& message, const NameMap& names);

// The JavaScript error for a failed C call: RangeError for invalid arguments (they are
// values out of range), TypeError for an absent array ("but received NULL"), Error
// otherwise, with `code` set to the status name. `message` is the core's, whose C names are
// translated by `names`.
Napi::Error status_error(Napi::Env env, tirl_status status, const std::string& message,
                         const NameMap& names = {});

template <class T>
struct TypedArrayTraits;
template <>
struct TypedArrayTraits<float> {
  static constexpr napi_typedarray_type kind = napi_float32_array;
  static constexpr const char* name = "Float32Array";
  static constexpr const char* device_dtypes = "f32";
  static constexpr DeviceDtype dtype = DeviceDtype::f32;
  static bool holds(DeviceDtype d) { return d == DeviceDtype::f32; }
};
template <>
struct TypedArrayTraits<uint8_t> {
  static constexpr napi_typedarray_type kind = napi_uint8_array;
  static constexpr const char* name = "Uint8Array";
  static constexpr const char* device_dtypes = "u8";
  static constexpr DeviceDtype dtype = DeviceDtype::u8;
  static bool holds(DeviceDtype d) { return d == DeviceDtype::u8; }
};
template <>
struct TypedArrayTraits<uint16_t> {
  static constexpr napi_typedarray_type kind = napi_uint16_array;
  static constexpr const char* name = "Uint16Array";
  static constexpr const char* device_dtypes = "bf16 or u16";
  static constexpr DeviceDtype dtype = DeviceDtype::u16;
  // bf16 logits are raw 16-bit words: either dtype name is accepted.
  static bool holds(DeviceDtype d) { return d == DeviceDtype::u16 || d == DeviceDtype::bf16; }
};
template <>
struct TypedArrayTraits<int32_t> {
  static constexpr napi_typedarray_type kind = napi_int32_array;
  static constexpr const char* name = "Int32Array";
  static constexpr const char* device_dtypes = "i32";
  static constexpr DeviceDtype dtype = DeviceDtype::i32;
  static bool holds(DeviceDtype d) { return d == DeviceDtype::i32; }
};

// A typed array's memory (or a DeviceArray's), seen from C. `present` is false for an
// absent optional array.
template <class T>
struct ArrayView {
  T* data = nullptr;
  int64_t length = 0;
  bool present = false;
};

// An output array (a typed array or DeviceArray), held until the call's result is built.
// A sync call builds it in the callback that made or read the array, whose handle scope
// keeps it alive: no reference to make and delete (~400 instructions a call). An async call
// builds it when its Promise settles, so it references the array until then.
class OutputRef {
 public:
  void hold(Napi::Env env, Napi::Object array, bool across_calls) {
    if (across_calls) {
      reference_ = Napi::Persistent(array);
    } else {
      env_ = env;
      local_ = array;
    }
  }
  Napi::Object Value() const { return local_ != nullptr ? Napi::Object(env_, local_) : reference_.Value(); }

 private:
  napi_env env_ = nullptr;
  napi_value local_ = nullptr;
  Napi::ObjectReference reference_;
};

// The host memory of an async call, owned by the call. JavaScript keeps running while the
// kernel does, and may detach (transfer) an ordinary ArrayBuffer, which frees its memory,
// or write into it. So the async form copies every array on an ordinary ArrayBuffer, when
// the call is made, into a private copy of that buffer at the same byte offset (arrays that
// share a buffer, like an in-place `out`, alias exactly as in the sync form); the kernel
// works on the copies, and a caller's `out` gets the result when the Promise settles.
// SharedArrayBuffers cannot be detached: their arrays are used in place, with no copy.
class HostSnapshot {
 public:
  // Where the kernel reads (and, for an output, writes) the `bytes` bytes of `array`.
  // `output_type` is null for an input; for a caller's output, its type name
  // (TypedArrayTraits<T>::name) and `output_length` its length, for the rejection if it is
  // detached before the result is copied into it (the text is made only then).
  // A copy the memory cannot hold is a RangeError naming `label`, as for an output.
  // `data`, `buffer` and `offset` are the array's, as napi_get_typedarray_info gave them.
  void* stage(Napi::Env env, const char* op, napi_value array, void* data, napi_value buffer,
              size_t offset, size_t bytes, const std::string& label, const char* output_type,
              int64_t output_length);
  // Copies the results into the caller's outputs (main thread, once the kernel is done).
  // Returns "" or, when an output was detached or resized meanwhile (nothing is then
  // copied), the TypeError message.
  std::string copy_back(Napi::Env env, const char* op);

 private:
  // Gives a copy's memory back (common.cc keeps large blocks for the next calls).
  struct Release {
    size_t capacity;
    void operator()(uint8_t* memory) const;
  };
  // A private copy of one ArrayBuffer; only the byte ranges of its arrays are filled.
  struct BufferCopy {
    const uint8_t* original;
    size_t length;
    std::unique_ptr<uint8_t, Release> memory;
    // (offset, bytes) already copied: the first inline (a buffer usually holds one array).
    std::pair<size_t, size_t> first;
    std::vector<std::pair<size_t, size_t>> more;
    bool filled(std::pair<size_t, size_t> range) const;
  };
  struct Output {
    Napi::ObjectReference array;
    const uint8_t* result;
    size_t bytes;
    std::string label;
    const char* type;
    int64_t length;
  };
  std::vector<BufferCopy> buffers_;
  std::vector<Output> outputs_;
};

// What Options::names() is made from, kept by an async call to make it only on an error.
struct NameSource {
  NameMap aliases;
  std::vector<const char*> keys;
  NameMap names() const;
};

// Reads and checks the fields of one op's options object.
class Options {
 public:
  Options(const Napi::CallbackInfo& info, const char* op);
  // A prepared call's positional form: the call's arguments are the arrays named by `keys`
  // (its Call::kArrays, at most kMostPositional), in that order, instead of one options
  // object; an absent or undefined argument is an absent array, and more arguments than
  // keys is a TypeError. There are no option keys to read, enumerate or check.
  static constexpr size_t kMostPositional = 8;
  Options(const Napi::CallbackInfo& info, const char* op, const char* const* keys, size_t count);

  Napi::Env env() const { return env_; }
  const char* op() const { return op_; }

  // Whether the field is present (not undefined).
  bool has(const char* name);

  // Option keys. Every key an op reads (has, array, number, ...) is known; once parse is
  // done, any other key present (not undefined) is a TypeError naming it and the op, so that
  // a misspelt option never goes unnoticed. `allow` makes a key known without reading it;
  // `refuse` is for a key that the call's other options make meaningless: present, it is a
  // TypeError "<op>: Expected no <name> (<because>) but received <value>", e.g.
  //   o.refuse("dualClip", "not read by policyLoss 'cispo'");
  void allow(const char* name);
  void refuse(const char* name, const std::string& because);
  // As refuse, for a reason that costs something to make (a string built per call): it is
  // made only when the key is present, e.g. o.refuse("weights", [&] { return not_read_by(q); }).
  template <class Because, class = std::enable_if_t<std::is_invocable_r_v<std::string, Because>>>
  void refuse(const char* name, Because&& because) {
    if (has(name)) refuse(name, std::string(because()));
  }
  // TypeError for the first key present that no one read, allowed or refused.
  void check_unknown_keys();

  // The JavaScript name that stands for a C argument in the core's messages, where it is not
  // the snake_case form of a key read (e.g. the C output grad_logits is `out`).
  void name_as(const char* c_name, const std::string& js_name);
  // C names and the JavaScript names for them: the keys read and name_as.
  NameMap names() const;
  NameSource name_source() const;
  // As name_source, moving the keys read out of this Options (an async call's last use of it).
  NameSource take_name_source();
  // For a prepared call: the names of the options read when it was prepared, which its
  // C call's messages may name. `names` outlives this Options.
  void inherit_names(const NameSource* names) { inherited_ = names; }

  // For an op with a CUDA kernel (called by define_op before parse): every array may then
  // be a DeviceArray instead of a typed array, all of the call's arrays on one device (all in
  // host memory or all on the same GPU), and outputs are allocated where the inputs are.
  // Without it an op sees only typed arrays, exactly as before.
  void allow_device_arrays() { device_arrays_allowed_ = true; }
  // Where the call's arrays live: the device to pass to the C ABI.
  tirl_device device() const { return device_; }

  // A typed array field of element type T (or a DeviceArray of the matching dtype, see
  // allow_device_arrays); absent -> present = false, or a TypeError when required.
  // Detached buffers and freed DeviceArrays are refused.
  template <class T>
  ArrayView<T> array(const char* name, bool required);

  // Where an op writes: `out` itself (member == nullptr) or `out[member]`, checked for
  // type and length; a fresh zeroed array of `length` elements when absent (a DeviceArray
  // when the call runs on CUDA). `holder` keeps the array alive until the result is built.
  template <class T>
  ArrayView<T> output(const char* member, int64_t length, OutputRef& holder);

  // A number, passed through as it is (the C call decides its range); `fallback` when absent.
  double number(const char* name, double fallback);
  // A number that must be present.
  double required_number(const char* name);
  // For a C option whose 0 means "not set" (a default, or off): absent gives `fallback`;
  // a number passes through, except 0 itself, which JavaScript says by leaving the key out
  // (RangeError).
  double unless_zero(const char* name, double fallback);
  // An integer in [min, max] (a count or size the binding itself computes with); `fallback`
  // when absent.
  int64_t integer(const char* name, int64_t fallback, int64_t min, int64_t max);
  bool boolean(const char* name, bool fallback);
  // One of `choices` (strings); returns its index, `fallback` when absent.
  int choice(const char* name, std::initializer_list<const char*> choices, int fallback);
  // A string of comma-separated items (verl's form, spaces around items ignored) or an
  // array of strings; empty when absent.
  std::vector<std::string> string_list(const char* name);
  // One finite number (a list of one) or an array of finite numbers; empty when absent.
  std::vector<double> number_list(const char* name);

  // RangeError unless `ok`: "<op>: Expected <expected> for <name> but received <value>".
  void require(bool ok, const char* name, const std::string& expected, double value);
  // RangeError unless the array has `length` elements.
  template <class T>
  void require_length(const ArrayView<T>& view, const char* name, int64_t length,
                      const std::string& because);

  [[noreturn]] void type_error(const std::string& expected, const std::string& name,
                               Napi::Value value);
  [[noreturn]] void range_error(const std::string& message);

  // The arrays an async call uses in place, not copied (on a SharedArrayBuffer, empty,
  // DeviceArrays, outputs it allocated): it keeps them alive while it runs.
  const std::vector<Napi::Value>& in_place() const { return in_place_; }

  // For the async form (called before parse): arrays on ordinary ArrayBuffers are copied
  // into snapshot(), which the kernel then uses instead of them.
  void stage_host_arrays() { staging_ = true; }
  HostSnapshot& snapshot() { return snapshot_; }
  // Bytes of the host arrays read so far (inputs and outputs), and whether any array was a
  // DeviceArray: what decides whether an async call is small enough to run at once
  // (KernelWork::queue).
  size_t host_bytes() const { return host_bytes_; }
  bool read_device_arrays() const { return device_arrays_read_; }

  // TypeError if any array seen so far has been detached, resized (a resizable or growable
  // buffer) or, for a DeviceArray, freed since it was checked: a getter on the options object
  // can run JavaScript between two reads, and the kernel must not use a stale pointer or length.
  void verify_not_detached();

 private:
  Napi::Value field(const char* name);
  // `source` with the names of a prepared call's options (inherit_names) added.
  NameSource with_inherited(NameSource source) const;
  // Whether the option is present and not undefined; `value` is set when it is.
  bool present(const char* name, Napi::Value* value) { return lookup(name, value) && !value->IsUndefined(); }
  // As present, without asking whether the value is undefined: false when the key is known
  // to be absent, else true with `value` set (perhaps to undefined). Inline for the ~40
  // absent keys an op asks for: a clear bit answers (lookup_key does the rest).
  bool lookup(const char* name, Napi::Value* value) {
    if (plain_ && (own_key_bits_ & own_key_bit(name)) == 0) {
      known_keys_.push_back(name);  // repeats are harmless; names() and messages drop them
      return false;
    }
    return lookup_key(name, value);
  }
  bool lookup_key(const char* name, Napi::Value* value);
  double number_of(const char* name, Napi::Value value, double fallback);
  bool known(std::string_view key) const;
  [[noreturn]] void unknown_key(const std::string& key, Napi::Value value);
  std::vector<std::string> unique_keys() const;
  // "a Float32Array"; "a Float32Array or a DeviceArray of f32" when a DeviceArray came
  // where device arrays are allowed (messages about typed arrays stay as they always were).
  template <class T>
  std::string expected_array(bool device_array_received = false) const;
  // Who may touch an array while an async call runs: the caller's arrays (inputs and
  // outputs it passed) or an output this call allocated, which no JavaScript can reach.
  enum class Access { input, caller_output, fresh_output };
  // Reads `value` as an array of T into `view` (typed array or allowed DeviceArray) and
  // checks that it lives where the call's other arrays do.
  // `typed_array`, when given, is what napi_is_typedarray said of `value`.
  template <class T>
  void read_array(Napi::Value value, const std::string& label, ArrayView<T>* view, Access access,
                  int64_t output_length = 0, const bool* typed_array = nullptr);
  // TypeError unless every array of the call is on the same device as the first one.
  void place(tirl_device device, const std::string& label, Napi::Value value);
  // TypeError unless `value` is a non-detached typed array of `kind` (`typed_array`: whether
  // napi_is_typedarray said it is one); gives its memory, length, buffer and byte offset.
  void check_typed_array(Napi::Value value, bool typed_array, const std::string& label,
                         napi_typedarray_type kind, const char* type_name, void** data,
                         size_t* length, napi_value* buffer, size_t* offset);
  Napi::Object out_object();
  // object[name] with the cached key (the members of `out`).
  Napi::Value member_of(Napi::Object object, const char* name);

  // The own keys of a plain options object (its prototype Object.prototype or null), read
  // once when the call is made: an option it lacks is then known to be absent without
  // asking V8, which for the ~40 options of ppoLoss cost more than the kernel on 1,024
  // tokens. Other objects (class instances, whose prototype may have getters), and plain
  // ones whose keys are not ASCII, hold a NUL or pass KeyCache::kOwnNamesBytes, are read key
  // by key. Keys that a getter adds while the options are read, and values that a Proxy
  // invents for keys it does not list, are not seen.
  struct OwnKey {
    const char* text;  // in own_names_inline_ or own_names_long_ (ASCII, NUL-terminated)
    uint64_t bit;      // own_key_bit(text): compared before the text
    bool read;
  };
  void snapshot_own_keys();
  OwnKey* own_key(const char* name);
  // One bit per own key, chosen by its first two characters (own_key_bit): most of the ~40
  // names an op asks for are absent, and a clear bit says so without comparing any text.
  static uint64_t own_key_bit(const char* name) {
    const unsigned first = static_cast<unsigned char>(name[0]);
    const unsigned second = first == 0 ? 0 : static_cast<unsigned char>(name[1]);
    return uint64_t{1} << ((first * 31 + second) & 63);
  }
  uint64_t own_key_bits_ = 0;

  Napi::Env env_;
  const char* op_;
  Napi::Object object_;
  bool plain_ = false;  // own_keys_ lists every key of object_ that can hold an option
  // The positional form's arguments by key (nullptr for one not passed): keys non-null
  // only in that form, whose object_ is empty.
  const char* const* positional_keys_ = nullptr;
  size_t positional_count_ = 0;
  napi_value positional_[kMostPositional] = {};
  std::vector<OwnKey> own_keys_;
  // The own keys' texts, each followed by a NUL: in the inline buffer when they fit.
  char own_names_inline_[256];
  std::string own_names_long_;
  // The keys read, allowed or refused (string literals or static tables, which outlive the
  // call), with repeats.
  std::vector<const char*> known_keys_;
  NameMap aliases_;                      // name_as
  std::vector<Napi::Value> inputs_;  // every array the call reads or writes
  std::vector<Napi::Value> in_place_;
  // Each array as it was read (same order as inputs_), for verify_not_detached; the
  // message texts are made only for an error.
  struct ReadArray {
    std::string label;
    const char* type_name;       // TypedArrayTraits<T>::name
    const char* device_dtypes;   // TypedArrayTraits<T>::device_dtypes
    bool on_device;
    const void* data;
    int64_t length;
  };
  std::string expected_text(const ReadArray& read) const;
  std::vector<ReadArray> read_arrays_;
  bool out_read_ = false;
  napi_value out_ = nullptr;  // the `out` object once read (nullptr: absent)
  bool device_arrays_allowed_ = false;
  tirl_device device_{TIRL_DEVICE_CPU, 0, nullptr};
  std::string placed_by_;  // label of the first array read, which fixed device_
  bool staging_ = false;
  size_t host_bytes_ = 0;
  bool device_arrays_read_ = false;
  HostSnapshot snapshot_;
  const NameSource* inherited_ = nullptr;
};

template <class T>
std::string Options::expected_array(bool device_array_received) const {
  return expected_text({{}, TypedArrayTraits<T>::name, TypedArrayTraits<T>::device_dtypes,
                        device_array_received, nullptr, 0});
}

template <class T>
void Options::read_array(Napi::Value value, const std::string& label, ArrayView<T>* view,
                         Access access, int64_t output_length, const bool* typed_array_known) {
  DeviceArrayInfo device_array;
  bool typed_array = false;
  if (typed_array_known != nullptr) {
    typed_array = *typed_array_known;
  } else if (napi_is_typedarray(env_, value, &typed_array) != napi_ok) {
    typed_array = false;
  }
  const bool on_device =
      !typed_array && device_arrays_allowed_ && read_device_array(env_, value, &device_array);
  // Where the array's memory was when read (not its async copy): verify_not_detached compares.
  const void* seen = nullptr;
  if (on_device) {
    if (!TypedArrayTraits<T>::holds(device_array.dtype)) type_error(expected_array<T>(true), label, value);
    if (device_array.freed) {
      throw Napi::TypeError::New(env_, std::string(op_) + ": Expected " + expected_array<T>(true) +
                                           " for " + label + " but received a freed DeviceArray");
    }
    place(device_array.device, label, value);
    view->data = static_cast<T*>(device_array.data);
    view->length = device_array.length;
    seen = view->data;
    device_arrays_read_ = true;
  } else {
    void* data = nullptr;
    size_t length = 0, offset = 0;
    napi_value buffer = nullptr;
    check_typed_array(value, typed_array, label, TypedArrayTraits<T>::kind, TypedArrayTraits<T>::name,
                      &data, &length, &buffer, &offset);
    place(tirl_device{TIRL_DEVICE_CPU, 0, nullptr}, label, value);
    seen = data;
    if (staging_ && access != Access::fresh_output) {
      data = snapshot_.stage(env_, op_, value, data, buffer, offset,
                             length * sizeof(T), label,
                             access == Access::caller_output ? TypedArrayTraits<T>::name : nullptr,
                             output_length);
    }
    view->data = static_cast<T*>(data);
    view->length = static_cast<int64_t>(length);
    host_bytes_ += length * sizeof(T);
  }
  view->present = true;
  inputs_.push_back(value);
  if (staging_ && static_cast<const void*>(view->data) == seen) in_place_.push_back(value);
  read_arrays_.push_back({label, TypedArrayTraits<T>::name, TypedArrayTraits<T>::device_dtypes,
                          on_device, seen, view->length});
}

template <class T>
ArrayView<T> Options::array(const char* name, bool required) {
  ArrayView<T> view;
  Napi::Value value;
  // A typed array is not undefined: asking napi_is_typedarray first spares the typeof.
  bool typed_array = false;
  if (!lookup(name, &value) ||
      (!(napi_is_typedarray(env_, value, &typed_array) == napi_ok && typed_array) && value.IsUndefined())) {
    if (required) type_error(expected_array<T>(), name, env_.Undefined());
    return view;
  }
  read_array(value, name, &view, Access::input, 0, &typed_array);
  return view;
}

template <class T>
ArrayView<T> Options::output(const char* member, int64_t length, OutputRef& holder) {
  ArrayView<T> view;
  Napi::Value value = env_.Undefined();
  std::string label = "out";
  if (member == nullptr) {
    value = field("out");
  } else if (Napi::Object out = out_object(); !out.IsEmpty()) {
    value = member_of(out, member);
    label += std::string(".") + member;
  }
  Access access = Access::caller_output;
  if (value.IsUndefined()) {
    value = device_.type == TIRL_DEVICE_CUDA
                ? Napi::Value(new_device_array(env_, TypedArrayTraits<T>::dtype, length, device_.index))
                : new_typed_array(env_, TypedArrayTraits<T>::name, length, op_, label);
    access = Access::fresh_output;
  }
  read_array(value, label, &view, access, length);
  static const std::string kResultSize = "the size of the result";  // made once, not per call
  require_length(view, label.c_str(), length, kResultSize);
  holder.hold(env_, value.As<Napi::Object>(), staging_);
  return view;
}

template <class T>
void Options::require_length(const ArrayView<T>& view, const char* name, int64_t length,
                             const std::string& because) {
  if (view.present && view.length != length) {
    range_error(std::string(op_) + ": Expected " + name + " to have length " +
                std::to_string(length) + " (" + because + ") but received length " +
                std::to_string(view.length));
  }
}

// ------------------------------------------------------------------ op definition

// A `Call` is one op invocation, parsed from JS on the main thread:
//   static Call parse(Options&);       checks arguments, allocates outputs
//   tirl_status run();                 the C call; may run on a worker thread
//   Napi::Value result(Napi::Env);     builds the JS result on the main thread
// An op with a CUDA kernel also has a member `tirl_device device = tirl_cpu();` that run()
// passes to the C ABI: its arrays may then be DeviceArrays (see allow_device_arrays), and
// `device` says where they are.
template <class Call, class = void>
struct HasDevice : std::false_type {};
template <class Call>
struct HasDevice<Call, std::void_t<decltype(std::declval<Call&>().device)>> : std::true_type {};

template <class Call>
Call parse_call(Options& options) {
  if constexpr (HasDevice<Call>::value) options.allow_device_arrays();
  Call call = Call::parse(options);
  if constexpr (HasDevice<Call>::value) call.device = options.device();
  options.check_unknown_keys();
  options.verify_not_detached();
  return call;
}
// Queues one work item on libuv's thread pool through a bare Node-API async work (its
// resource name "tirl", no resource object of ours) and returns the Promise
// that `complete` settles through `*deferred`: the least a Promise-returning call off the
// event loop costs in Node-API. Every op's async form and the bench's floor peer
// (poolRoundTrip, bindings/library.cc) go through it. On failure nothing stays queued and
// it throws.
napi_value queue_async_work(napi_env env, napi_async_execute_callback execute,
                            napi_async_complete_callback complete, void* data,
                            napi_async_work* work, napi_deferred* deferred);

// A Promise rejected with `error`: the async forms report bad arguments as a rejection, as
// they report errors the kernel finds, never by throwing.
Napi::Value rejected_promise(Napi::Env env, const Napi::Error& error);

// An async call whose kernel has already run, waiting to settle its Promise.
class SettleSoon {
 public:
  virtual ~SettleSoon() = default;
  // Settles the Promise (copies the results into the caller's outputs, or rejects).
  virtual void settle_now() = 0;
};

// Takes `work` and settles it at the next microtask checkpoint (queueMicrotask), once the
// JavaScript that made the call has returned: until then, as for a call on the pool, the
// caller's outputs stay untouched and may still be detached (a rejection). Settles it at
// once if it cannot be queued.
void settle_soon(Napi::Env env, std::unique_ptr<SettleSoon> work);

// An async call whose arrays are all host arrays of at most this many bytes together runs
// its kernel on the main thread when it is made, and settles at the next microtask
// (settle_soon): the hop through libuv's thread pool and back costs the main thread more
// (Node-API's empty async work: 33 us of CPU, 44 us until it settles, on the 2-vCPU EPYC VM
// of benchmarks/results/cpu-2026-12-06.md; 16 us on the Xeon) than the slowest kernel per
// byte, rolloutCorrection, adds for 64 KiB on one thread (about 11 us over a 64-token call).
constexpr size_t kRunAtOnceBytes = 64 * 1024;

// One async call: the parsed call, its host copies, and what it uses in place, queued by
// queue_async_work (or run at once and settled soon, when small). Napi::AsyncWorker made a
// resource object, a name string and a reference per call on top of this.
template <class Call>
class KernelWork final : public SettleSoon {
 public:
  // Queues `call`, parsed by `options` (which staged its host arrays); returns its Promise.
  static Napi::Value queue(Napi::Env env, const char* op, Call&& call, Options& options) {
    const bool at_once = !options.read_device_arrays() && options.host_bytes() <= kRunAtOnceBytes;
    std::unique_ptr<KernelWork> self(
        new KernelWork(env, op, std::move(call), std::move(options.snapshot()), options.take_name_source()));
    self->hold(options.in_place());
    if (at_once) {
      napi_value promise;
      NAPI_THROW_IF_FAILED(env, napi_create_promise(env, &self->deferred_, &promise), Napi::Value());
      execute(env, self.get());
      settle_soon(env, std::move(self));
      return Napi::Value(env, promise);
    }
    napi_value promise = queue_async_work(env, &execute, &complete, self.get(), &self->work_,
                                          &self->deferred_);
    self.release();  // complete() deletes it
    return Napi::Value(env, promise);
  }

  // Runs on the main thread once the Promise has settled, or while the environment shuts
  // down (a worker thread that exits or is terminated waits for its pending kernels).
  ~KernelWork() override {
    for (void* lease : leases_) end_device_array_lease(lease);
    if (work_ != nullptr) napi_delete_async_work(env_, work_);
  }

 private:
  KernelWork(Napi::Env env, const char* op, Call&& call, HostSnapshot&& snapshot, NameSource&& names)
      : env_(env), op_(op), call_(std::move(call)), snapshot_(std::move(snapshot)), names_(std::move(names)) {}

  // The arrays the kernel uses in place (the copied ones need nothing): referenced, and
  // DeviceArrays leased, until the call settles.
  void hold(const std::vector<Napi::Value>& in_place) {
    if (in_place.empty()) return;
    held_.reserve(in_place.size());
    for (const Napi::Value& v : in_place) {
      held_.push_back(Napi::Persistent(v.As<Napi::Object>()));
      if (void* lease = begin_device_array_lease(env_, v)) leases_.push_back(lease);
    }
  }

  // On a pool thread: the C call only, no JavaScript.
  static void execute(napi_env, void* data) {
    auto* self = static_cast<KernelWork*>(data);
    self->status_ = self->call_.run();
    if (self->status_ != TIRL_OK) self->message_ = tirl_last_error();
  }

  static void complete(napi_env, napi_status status, void* data) {
    std::unique_ptr<KernelWork> self(static_cast<KernelWork*>(data));
    if (status == napi_cancelled) return;  // never cancelled: nothing to settle
    self->settle_now();
  }

  void settle_now() override {
    try {
      settle();
    } catch (const Napi::Error&) {
      // Only when the environment is shutting down (its worker thread exited or was
      // terminated while the kernel ran): no JavaScript is left to settle the Promise for,
      // and an exception escaping here would abort the whole process.
    }
  }

  // Node-API calls complete() inside a handle scope and a callback scope, which runs the
  // Promise's reactions when it returns.
  void settle() {
    Napi::Env env = env_;
    if (status_ != TIRL_OK) {
      reject(status_error(env, status_, message_, names_.names()).Value());
      return;
    }
    if (std::string detached = snapshot_.copy_back(env, op_); !detached.empty()) {
      reject(Napi::TypeError::New(env, detached).Value());
      return;
    }
    Napi::Value result;
    try {
      result = call_.result(env);
    } catch (const Napi::Error& e) {
      reject(e.Value());
      return;
    }
    NAPI_THROW_IF_FAILED_VOID(env, napi_resolve_deferred(env, deferred_, result));
  }

  void reject(napi_value error) {
    NAPI_THROW_IF_FAILED_VOID(env_, napi_reject_deferred(env_, deferred_, error));
  }

  Napi::Env env_;
  const char* op_;
  Call call_;
  HostSnapshot snapshot_;
  NameSource names_;
  napi_async_work work_ = nullptr;
  napi_deferred deferred_ = nullptr;
  std::vector<Napi::ObjectReference> held_;
  std::vector<void*> leases_;
  tirl_status status_ = TIRL_OK;
  std::string message_;
};

// Converts any C++ exception other than a JS error into a JS Error, so nothing escapes.
template <class Body>
Napi::Value guard(Napi::Env env, Body&& body) {
  try {
    return body();
  } catch (const Napi::Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw Napi::Error::New(env, "tirl: out of memory");
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, std::string("tirl: internal error: ") + e.what());
  }
}

// One sync call: `read` parses the call from `options` (define_op's parse_call, or a
// prepared call's arrays), then the C call runs on this thread.
template <class Call, class Read>
Napi::Value run_sync(Napi::Env env, Options& options, Read&& read) {
  Call call = read(options);
  tirl_status status = call.run();
  if (status != TIRL_OK) {
    throw status_error(env, status, tirl_last_error(), options.names());
  }
  return call.result(env);
}
template <class Call, class Read>
Napi::Value call_sync(const Napi::CallbackInfo& info, const char* name, Read&& read) {
  return guard(info.Env(), [&]() -> Napi::Value {
    Options options(info, name);
    return run_sync<Call>(info.Env(), options, read);
  });
}

// One async call: as call_sync, with the host arrays staged and the C call queued on
// libuv's thread pool; returns its Promise, rejected for bad arguments as for an error the
// C call finds (so the TypeScript wrappers need no `async` of their own, a Promise and
// three microtasks more a call).
template <class Call, class Read>
Napi::Value call_async(const Napi::CallbackInfo& info, const char* name, Read&& read) {
  try {
    return guard(info.Env(), [&]() -> Napi::Value {
      Options options(info, name);
      options.stage_host_arrays();
      Call call = read(options);
      return KernelWork<Call>::queue(info.Env(), name, std::move(call), options);
    });
  } catch (const Napi::Error& e) {
    return rejected_promise(info.Env(), e);
  }
}

// ------------------------------------------------------------------ prepared calls
//
// An op whose Call splits its parse in three can also be prepared: prepare<Op>(options) reads
// and checks every option that is not an array once, and returns a function that takes only
// the arrays (with `.async` for the Promise form):
//   struct Settings;                                  what the options decide (copied per call)
//   static constexpr const char* kArrays[];           the keys that go to the prepared call
//   static void options_before(Options&, Settings&);  options read before the arrays
//   static Call arrays(Options&, const Settings&);    reads the arrays, allocates outputs
//   static void options_after(Options&, Settings&);   options read after the arrays
// and its parse is options_before, arrays, options_after (the order matters: a getter on an
// option may change an array read before it, which verify_not_detached catches). Ranges
// are still the C call's to check, on every call (a few nanoseconds).
template <class Call, class = void>
struct Preparable : std::false_type {};
template <class Call>
struct Preparable<Call, std::void_t<typename Call::Settings>> : std::true_type {};

template <class Call>
struct PreparedCall {
  typename Call::Settings settings;
  NameSource names;  // of the options read when prepared, for the C call's messages
};

// The arrays of a prepared call, read as parse_call reads a whole call.
template <class Call>
Call parse_prepared(Options& options, const PreparedCall<Call>& prepared) {
  options.inherit_names(&prepared.names);
  if constexpr (HasDevice<Call>::value) options.allow_device_arrays();
  Call call = Call::arrays(options, prepared.settings);
  if constexpr (HasDevice<Call>::value) call.device = options.device();
  options.check_unknown_keys();
  options.verify_not_detached();
  return call;
}

template <class Call>
using PreparedData = std::pair<const char*, std::shared_ptr<const PreparedCall<Call>>>;

// The three functions of a prepared op: the call on an object of arrays, its .async, and
// its .positional (the arrays as arguments, in Call::kArrays order: no object to read).
enum class PreparedForm { sync, async, positional };

// The callback of a prepared op's function: its data is the op's name and the call.
template <class Call, PreparedForm Form>
napi_value prepared_entry(napi_env raw_env, napi_callback_info raw_info) {
  Napi::CallbackInfo info(raw_env, raw_info);
  const PreparedData<Call>& data = *static_cast<const PreparedData<Call>*>(info.Data());
  const auto read = [&](Options& o) { return parse_prepared<Call>(o, *data.second); };
  try {
    if constexpr (Form == PreparedForm::async) return call_async<Call>(info, data.first, read);
    if constexpr (Form == PreparedForm::sync) return call_sync<Call>(info, data.first, read);
    if constexpr (Form == PreparedForm::positional) {
      static_assert(std::size(Call::kArrays) <= Options::kMostPositional, "a positional form of too many arrays");
      return guard(info.Env(), [&]() -> Napi::Value {
        Options options(info, data.first, Call::kArrays, std::size(Call::kArrays));
        return run_sync<Call>(info.Env(), options, read);
      });
    }
  } catch (const Napi::Error& e) {
    e.ThrowAsJavaScriptException();
    return nullptr;
  }
}

// A function calling a prepared op in one of its forms; its data lives until it is collected.
template <class Call, PreparedForm Form>
Napi::Function prepared_function(Napi::Env env, const char* name,
                                 const std::shared_ptr<const PreparedCall<Call>>& prepared) {
  auto* data = new PreparedData<Call>(name, prepared);
  napi_value function;
  const char* function_name = Form == PreparedForm::sync ? name : Form == PreparedForm::async ? "async" : "positional";
  if (napi_create_function(env, function_name, NAPI_AUTO_LENGTH,
                           &prepared_entry<Call, Form>, data, &function) != napi_ok ||
      napi_add_finalizer(
          env, function, data,
          [](napi_env, void* finalize_data, void*) {
            delete static_cast<PreparedData<Call>*>(finalize_data);
          },
          nullptr, nullptr) != napi_ok) {
    delete data;
    throw Napi::Error::New(env);
  }
  return Napi::Function(env, function);
}

template <class Call>
Napi::Value prepare_call(const Napi::CallbackInfo& info, const char* name) {
  return guard(info.Env(), [&]() -> Napi::Value {
    Options options(info, name);
    for (const char* key : Call::kArrays) {
      options.refuse(key, "an array: pass it to the prepared call");
    }
    auto prepared = std::make_shared<PreparedCall<Call>>();
    Call::options_before(options, prepared->settings);
    Call::options_after(options, prepared->settings);
    options.check_unknown_keys();
    prepared->names = options.name_source();
    Napi::Function sync = prepared_function<Call, PreparedForm::sync>(info.Env(), name, prepared);
    sync.Set("async", prepared_function<Call, PreparedForm::async>(info.Env(), name, prepared));
    sync.Set("positional", prepared_function<Call, PreparedForm::positional>(info.Env(), name, prepared));
    return sync;
  });
}

template <class Call>
void define_op(Napi::Env env, Napi::Object exports, const char* name) {
  exports.Set(name, Napi::Function::New(
                        env,
                        [name](const Napi::CallbackInfo& info) -> Napi::Value {
                          return call_sync<Call>(info, name, parse_call<Call>);
                        },
                        name));
  std::string async_name = std::string(name) + "Async";
  exports.Set(async_name, Napi::Function::New(
                              env,
                              [name](const Napi::CallbackInfo& info) -> Napi::Value {
                                return call_async<Call>(info, name, parse_call<Call>);
                              },
                              async_name));
  if constexpr (Preparable<Call>::value) {
    // "ppoLoss" -> "preparePpoLoss"
    std::string prepare_name = std::string("prepare") + name;
    prepare_name[7] = static_cast<char>(std::toupper(static_cast<unsigned char>(prepare_name[7])));
    exports.Set(prepare_name, Napi::Function::New(
                                  env,
                                  [name](const Napi::CallbackInfo& info) -> Napi::Value {
                                    return prepare_call<Call>(info, name);
                                  },
                                  prepare_name));
  }
}

// Wall-clock and process CPU time since construction (c_call_loop's `times`).
class NativeClock {
 public:
  NativeClock() : wall_(seconds(CLOCK_MONOTONIC)), cpu_(seconds(CLOCK_PROCESS_CPUTIME_ID)) {}
  // times[0], times[1] = the wall and CPU seconds since construction, divided by `calls`.
  void per_call(double calls, double* times) const {
    const double cpu = seconds(CLOCK_PROCESS_CPUTIME_ID), wall = seconds(CLOCK_MONOTONIC);
    times[0] = (wall - wall_) / calls;
    times[1] = (cpu - cpu_) / calls;
  }

 private:
  static double seconds(clockid_t clock);
  double wall_, cpu_;
};

// One call of `<op>CCalls` (define_c_call_loop).
template <class Call>
Napi::Value c_call_loop(const Napi::CallbackInfo& info, const char* name) {
  Napi::Env env = info.Env();
  Options options(info, name);
  Call call = parse_call<Call>(options);
  const std::string function = std::string(name) + "CCalls";
  Napi::Value n = info.Length() > 1 ? info[1] : env.Undefined();
  const double calls = n.IsNumber() ? n.As<Napi::Number>().DoubleValue() : 0;
  if (!(calls >= 1 && calls <= 2147483647.0) || calls != std::floor(calls)) {
    const std::string message =
        function + ": Expected an integer in [1, 2147483647] for calls but received " + describe(n);
    if (n.IsNumber()) throw Napi::RangeError::New(env, message);
    throw Napi::TypeError::New(env, message);
  }
  double* times = nullptr;
  if (info.Length() > 2 && !info[2].IsUndefined()) {
    Napi::Value t = info[2];
    if (!t.IsTypedArray() || t.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array ||
        t.As<Napi::TypedArray>().ElementLength() < 2) {
      throw Napi::TypeError::New(
          env, function + ": Expected a Float64Array of length at least 2 for times but received " + describe(t));
    }
    times = t.As<Napi::Float64Array>().Data();
  }
  const NativeClock start;
  for (int64_t i = 0, end = static_cast<int64_t>(calls); i < end; ++i) {
    if (tirl_status status = call.run(); status != TIRL_OK) {
      throw status_error(env, status, tirl_last_error(), options.names());
    }
  }
  if (times != nullptr) start.per_call(calls, times);
  return env.Undefined();
}

// For the bench, not the SDK: `<op>CCalls(options, calls, times?)`, for every op, reads one
// call of the op exactly as the sync form does, then makes its C call `calls` times on
// those arrays and options with nothing between them, and returns undefined. With `times`,
// a Float64Array of at least 2 entries, it writes there the wall-clock and the process CPU
// seconds a C call took, measured around the C calls alone: in the same process as the
// JavaScript forms and sampled in the same rounds, the C ABI's own time (the bench's C-call
// peer, benchmarks/harness.ts). Its options are read before the clock starts, which brings
// the binding's code and the arrays' headers into the caches but not the arrays' data: a
// call after a sweep of the caches is a cold C call. `calls` is an integer in [1, 2^31 - 1].
template <class Call>
void define_c_call_loop(Napi::Env env, Napi::Object exports, const char* name) {
  std::string loop_name = std::string(name) + "CCalls";
  exports.Set(loop_name, Napi::Function::New(
                             env,
                             [name](const Napi::CallbackInfo& info) -> Napi::Value {
                               return guard(info.Env(), [&]() -> Napi::Value {
                                 return c_call_loop<Call>(info, name);
                               });
                             },
                             loop_name));
}

// The register function of ops.def's op `c_name` (bindings/ops.h), with `Call` as its parse,
// run and result: written once at the end of each op's binding file.
#define TIRL_BINDING(c_name, Call)                                   \
  void register_##c_name(Napi::Env env, Napi::Object exports) {      \
    define_op<Call>(env, exports, ::tirl::op_name::c_name);          \
    define_c_call_loop<Call>(env, exports, ::tirl::op_name::c_name); \
  }

}  // namespace tirl::binding
