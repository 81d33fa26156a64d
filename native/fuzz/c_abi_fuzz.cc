// libFuzzer harness of the whole C ABI (built by scripts/fuzz-native.sh with clang and
// -fsanitize=fuzzer,address,undefined). Each input is a short program: calls of every
// tirl_* function with sizes, options and arrays decoded from the bytes, adversarial ones
// included: negative and huge sizes, NaN/Inf/extreme numbers and options, null pointers,
// roles and labels out of range, broken seq_offsets, unknown enum values, the in-place and
// partially overlapping buffers of tokenLogprobsBackward, CUDA devices without CUDA.
//
// The contract checked: every call returns TIRL_OK or an error status with a non-empty
// tirl_last_error(), never crashes, and the sanitizers report nothing. A successful CPU call
// gives bitwise the same outputs with another thread count. Every buffer is a heap block of
// exactly the size the ABI documents, so AddressSanitizer catches any access past it; a
// size too large to allocate comes with null pointers (which must be refused), a size
// whose byte count overflows with a one-element block (which must be refused too).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <vector>

#include "tirl/tirl.h"

namespace {

// Small enough for thousands of calls a second, large enough to cross the kernels' chunk
// boundaries (16,384 to 65,536 tokens) now and then.
constexpr int64_t kMaxElements = 1 << 20;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

[[noreturn]] void contract_broken(const char* what, const char* op) {
  std::fprintf(stderr, "tirl fuzz: %s: %s\n", op, what);
  std::abort();
}

// Every tirl call goes through this: a status is TIRL_OK or an error with its message.
tirl_status checked(const char* op, tirl_status status) {
  if (status == TIRL_OK) return status;
  if (status < TIRL_ERROR_INVALID_ARGUMENT || status > TIRL_ERROR_INTERNAL) {
    contract_broken("unknown status", op);
  }
  const char* message = tirl_last_error();
  if (message == nullptr || message[0] == '\0') contract_broken("error without a message", op);
  return status;
}

// Enum fields are set through their bytes: a C caller may store any int there, and the
// library must refuse it rather than rely on C++'s narrower enum ranges.
template <class Enum>
void set_enum(Enum& field, int32_t value) {
  static_assert(sizeof(Enum) == sizeof(int32_t), "the ABI's enums are int-sized");
  std::memcpy(&field, &value, sizeof value);
}

// splitmix64: array contents come from a seed, so a large array costs a few input bytes.
class Prng {
 public:
  explicit Prng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) for n >= 1.
  uint64_t below(uint64_t n) { return next() % n; }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// An array the caller owns: exactly `count` elements on the heap, or null.
template <class T>
struct Buffer {
  std::unique_ptr<T[]> data;
  int64_t count = 0;  // elements allocated

  T* get() const { return data.get(); }
  size_t bytes() const { return static_cast<size_t>(count) * sizeof(T); }
};

template <class T>
Buffer<T> allocate(int64_t count) {
  Buffer<T> buffer;
  buffer.data.reset(new T[static_cast<size_t>(count)]);  // new T[0] is a valid, non-null block
  buffer.count = count;
  return buffer;
}

const float kSpecialFloats[] = {
    NAN, -NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 1.0f, -1.0f,
    std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
    std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
    88.8f, -88.8f, 104.0f, -104.0f, 1e4f, -1e4f, 1e30f, -1e30f, 16777216.0f};

const double kSpecialDoubles[] = {
    0.0, -0.0, 1.0, -1.0, 0.2, 0.5, 0.999999999, 1.0000001, 2.0, 1e-6, 1e-300, 1e30,
    1e300, -1e300, std::numeric_limits<double>::max(), -std::numeric_limits<double>::max(),
    std::numeric_limits<double>::min(), std::numeric_limits<double>::denorm_min(), INFINITY,
    -INFINITY, NAN, -NAN, 4294967296.0, -4294967296.0};

const int64_t kHugeSizes[] = {INT32_MAX, int64_t{1} << 31, (int64_t{1} << 32) + 1,
                              int64_t{1} << 40, int64_t{1} << 61, int64_t{1} << 62,
                              kInt64Max - 1, kInt64Max};

const int64_t kNegativeSizes[] = {-1, -2, INT32_MIN, std::numeric_limits<int64_t>::min(),
                                  -(int64_t{1} << 40)};

class Decoder {
 public:
  Decoder(const uint8_t* data, size_t size) : in_(data, size) {}

  bool empty() { return in_.remaining_bytes() == 0; }
  uint8_t byte() { return in_.ConsumeIntegral<uint8_t>(); }
  int64_t in_range(int64_t low, int64_t high) { return in_.ConsumeIntegralInRange(low, high); }
  // True with probability about 1 / n on random bytes.
  bool one_in(int n) { return byte() % n == 0; }
  Prng prng() { return Prng(in_.ConsumeIntegral<uint64_t>()); }

  // A size: mostly small, sometimes past a chunk, sometimes negative or huge.
  int64_t size(int64_t small) {
    const uint8_t mode = byte();
    if (mode < 150) return in_.ConsumeIntegralInRange<int64_t>(0, small);
    if (mode < 200) return in_.ConsumeIntegralInRange<int64_t>(0, 4 * small + 8);
    if (mode < 215) return in_.ConsumeIntegralInRange<int64_t>(0, 70000);
    if (mode < 225) return 0;
    if (mode < 235) return in_.PickValueInArray(kNegativeSizes);
    if (mode < 250) return in_.PickValueInArray(kHugeSizes);
    return in_.ConsumeIntegral<int64_t>();
  }

  // An option value: the default most of the time, else a typical or extreme number.
  void number(double& field) {
    const uint8_t mode = byte();
    if (mode < 128) return;
    if (mode < 200) field = in_.PickValueInArray(kSpecialDoubles);
    else if (mode < 240) field = in_.ConsumeFloatingPointInRange<double>(-4.0, 4.0);
    else field = in_.ConsumeFloatingPoint<double>();
  }

  // An enum option: the default most of the time, else any int.
  template <class Enum>
  void enumeration(Enum& field, int32_t valid_count) {
    const uint8_t mode = byte();
    if (mode < 128) return;
    if (mode < 220) set_enum(field, in_.ConsumeIntegralInRange<int32_t>(0, valid_count - 1));
    else if (mode < 240) set_enum(field, in_.ConsumeIntegralInRange<int32_t>(-2, valid_count + 8));
    else set_enum(field, in_.ConsumeIntegral<int32_t>());
  }

  tirl_device device() {
    tirl_device device = tirl_cpu();
    const uint8_t mode = byte();
    if (mode < 230 || !cuda_fuzzable_) return device;
    if (mode < 245) {
      set_enum(device.type, TIRL_DEVICE_CUDA);
      device.index = in_.ConsumeIntegralInRange<int32_t>(-1, 2);
    } else {
      set_enum(device.type, in_.ConsumeIntegral<int32_t>());
      device.index = in_.ConsumeIntegral<int32_t>();
    }
    return device;
  }

  // What a caller passes for an array of `count` elements: the exact block; null now and
  // then (refused unless the array is optional or empty); null when too large to allocate;
  // a one-element block when the count is negative or its byte size overflows (both must
  // be refused before any access).
  template <class T>
  Buffer<T> array(int64_t count) {
    if (count < 0 || count > kInt64Max / static_cast<int64_t>(sizeof(T))) return allocate<T>(1);
    if (count > kMaxElements || one_in(24)) return {};
    return allocate<T>(count);
  }

  // An optional array: null half the time.
  template <class T>
  Buffer<T> optional_array(int64_t count) {
    if (byte() & 1) return {};
    return array<T>(count);
  }

  void fill_floats(Buffer<float>& buffer) {
    if (buffer.get() == nullptr || buffer.count == 0) return;
    Prng random = prng();
    const uint8_t mode = byte();
    const float scale = mode % 4 == 0 ? 1.0f : mode % 4 == 1 ? 10.0f : mode % 4 == 2 ? 1e4f : 1e30f;
    const bool negative = (mode >> 2) & 1;  // log-probabilities are <= 0
    const int special_mode = (mode >> 3) % 4;  // specials: none, 1 in 4, 1 in 16, 1 in 64
    const uint64_t special_one_in = special_mode == 0 ? 0 : uint64_t{1} << (2 * special_mode);
    for (int64_t i = 0; i < buffer.count; ++i) {
      float value = static_cast<float>((negative ? -random.unit() : 2 * random.unit() - 1) * scale);
      if (special_one_in != 0 && random.below(special_one_in) == 0) {
        value = kSpecialFloats[random.below(std::size(kSpecialFloats))];
      }
      buffer.data[i] = value;
    }
  }

  // bf16 logits: raw bit patterns (NaN and Inf included) or rounded floats.
  void fill_bf16(Buffer<uint16_t>& buffer) {
    if (buffer.get() == nullptr) return;
    Prng random = prng();
    const bool raw = byte() & 1;
    for (int64_t i = 0; i < buffer.count; ++i) {
      if (raw) {
        buffer.data[i] = static_cast<uint16_t>(random.next());
      } else {
        const float value = static_cast<float>(8 * random.unit() - 4);
        uint32_t bits;
        std::memcpy(&bits, &value, sizeof bits);
        buffer.data[i] = static_cast<uint16_t>(bits >> 16);
      }
    }
  }

  // Masks, keep flags and roles: all zero, all set, 0/1 at random, or any byte; roles are
  // 0..3 with an invalid one now and then.
  void fill_bytes(Buffer<uint8_t>& buffer, bool roles) {
    if (buffer.get() == nullptr) return;
    Prng random = prng();
    const uint8_t mode = byte() % 5;
    for (int64_t i = 0; i < buffer.count; ++i) {
      uint8_t value = 0;
      switch (mode) {
        case 0: value = 0; break;
        case 1: value = 1; break;
        case 2: value = static_cast<uint8_t>(random.next() & 1); break;
        case 3: value = static_cast<uint8_t>(random.next()); break;
        default:
          value = static_cast<uint8_t>(roles ? random.below(4) : (random.below(8) != 0));
          break;
      }
      buffer.data[i] = value;
    }
    if (roles && buffer.count > 0 && one_in(8)) {
      buffer.data[random.below(static_cast<uint64_t>(buffer.count))] =
          static_cast<uint8_t>(4 + random.below(252));
    }
  }

  // seq_offsets for `num_seqs` sequences over `num_tokens` tokens: valid cuts (uniform,
  // or piled up at either end so that one sequence spans many chunks), or one entry broken.
  Buffer<int32_t> offsets(int64_t num_seqs, int64_t num_tokens) {
    if (num_seqs < 0 || num_seqs == kInt64Max) return array<int32_t>(num_seqs);
    Buffer<int32_t> buffer = array<int32_t>(num_seqs + 1);
    if (buffer.get() == nullptr || buffer.count != num_seqs + 1) return buffer;
    Prng random = prng();
    const uint8_t mode = byte();
    const int64_t end = std::min<int64_t>(std::max<int64_t>(num_tokens, 0), INT32_MAX);
    std::vector<int32_t> cuts(static_cast<size_t>(num_seqs + 1));
    for (int64_t i = 0; i <= num_seqs; ++i) {
      const int64_t anywhere = static_cast<int64_t>(random.below(static_cast<uint64_t>(end) + 1));
      const bool piled = mode % 3 != 0 && random.below(8) != 0;
      const int64_t cut = !piled ? anywhere : mode % 3 == 1 ? 0 : end;
      cuts[static_cast<size_t>(i)] = static_cast<int32_t>(cut);
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.front() = 0;
    cuts.back() = static_cast<int32_t>(end);
    std::memcpy(buffer.get(), cuts.data(), cuts.size() * sizeof(int32_t));
    if (mode >= 200) {
      const int32_t past_end = static_cast<int32_t>(static_cast<uint32_t>(end) + 1u);
      const int32_t bad[] = {-1, 1, INT32_MAX, INT32_MIN, past_end,
                             static_cast<int32_t>(random.next())};
      buffer.data[random.below(static_cast<uint64_t>(buffer.count))] =
          bad[random.below(std::size(bad))];
    }
    return buffer;
  }

  // Labels in [0, vocab_size), with an out-of-range one now and then.
  void fill_labels(Buffer<int32_t>& buffer, int64_t vocab_size) {
    if (buffer.get() == nullptr) return;
    Prng random = prng();
    const uint64_t range =
        vocab_size >= 1 && vocab_size <= INT32_MAX ? static_cast<uint64_t>(vocab_size) : 1;
    for (int64_t i = 0; i < buffer.count; ++i) {
      buffer.data[i] = static_cast<int32_t>(random.below(range));
    }
    if (buffer.count > 0 && one_in(8)) {
      const int32_t bad[] = {-1, INT32_MIN, INT32_MAX, static_cast<int32_t>(range),
                             static_cast<int32_t>(random.next())};
      buffer.data[random.below(static_cast<uint64_t>(buffer.count))] =
          bad[random.below(std::size(bad))];
    }
  }

  int32_t threads() {
    const uint8_t mode = byte();
    if (mode < 240) return 1 + mode % 4;
    const int32_t odd[] = {0, -1, 1024, 1025, INT32_MIN, INT32_MAX};
    return in_.PickValueInArray(odd);
  }

  void set_cuda_fuzzable(bool fuzzable) { cuda_fuzzable_ = fuzzable; }

 private:
  FuzzedDataProvider in_;
  bool cuda_fuzzable_ = false;
};

// An output region of a call, compared between two runs with different thread counts.
struct Output {
  void* data;
  size_t bytes;
};

// Runs `call` (returning tirl_status) with all outputs prefilled, checks the status, and,
// when it succeeded on the CPU, runs it again with another thread count: the outputs must be
// bitwise the same. Returns the first status.
template <class Call>
tirl_status run(const char* op, Decoder& in, tirl_device device, std::vector<Output> outputs,
                Call call) {
  const bool rerun = in.byte() < 64;
  const int32_t other_threads = 1 + in.byte() % 5;
  for (Output& o : outputs) {
    if (o.data != nullptr) std::memset(o.data, 0xA5, o.bytes);
  }
  const tirl_status status = checked(op, call());
  if (status != TIRL_OK || !rerun || device.type != TIRL_DEVICE_CPU) return status;
  std::vector<std::vector<unsigned char>> first;
  for (Output& o : outputs) {
    const auto* bytes = static_cast<const unsigned char*>(o.data);
    first.emplace_back(bytes, bytes + (o.data != nullptr ? o.bytes : 0));
    if (o.data != nullptr) std::memset(o.data, 0xA5, o.bytes);
  }
  const int32_t threads = tirl_num_threads();
  if (checked("tirl_set_num_threads", tirl_set_num_threads(other_threads)) != TIRL_OK) {
    contract_broken("a thread count in 1..5 refused", op);
  }
  if (checked(op, call()) != TIRL_OK) contract_broken("succeeded once, failed on a rerun", op);
  tirl_set_num_threads(threads);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto* bytes = static_cast<const unsigned char*>(outputs[i].data);
    if (!std::equal(first[i].begin(), first[i].end(), bytes)) {
      contract_broken("outputs differ with another thread count", op);
    }
  }
  return status;
}

template <class T>
Output output(Buffer<T>& buffer) {
  return {buffer.get(), buffer.get() != nullptr ? buffer.bytes() : 0};
}

void fuzz_ppo_loss(Decoder& in) {
  const int64_t num_tokens = in.size(64);
  const int64_t num_seqs = in.size(8);
  Buffer<float> logp = in.array<float>(num_tokens), old_logp = in.array<float>(num_tokens),
                advantages = in.array<float>(num_tokens);
  in.fill_floats(logp);
  in.fill_floats(old_logp);
  in.fill_floats(advantages);
  Buffer<uint8_t> mask = in.array<uint8_t>(num_tokens);
  in.fill_bytes(mask, false);
  Buffer<int32_t> offsets = in.one_in(4) ? Buffer<int32_t>{} : in.offsets(num_seqs, num_tokens);
  Buffer<float> ref_logp = in.optional_array<float>(num_tokens),
                weights = in.optional_array<float>(num_tokens);
  in.fill_floats(ref_logp);
  in.fill_floats(weights);
  tirl_ppo_options options = tirl_ppo_options_default();
  in.number(options.clip_low);
  in.number(options.clip_high);
  in.number(options.dual_clip);
  in.enumeration(options.aggregation, 5);
  in.number(options.token_normalizer);
  in.number(options.seq_normalizer);
  in.number(options.horizon);
  in.number(options.dp_size);
  in.number(options.kl_coef);
  in.enumeration(options.kl_estimator, 7);
  in.enumeration(options.ratio_level, 2);
  const bool null_options = in.one_in(32), null_result = in.one_in(32);
  Buffer<float> grad = in.optional_array<float>(num_tokens);
  tirl_ppo_result result;
  const tirl_device device = in.device();
  run("tirl_ppo_loss", in, device, {output(grad), {&result, sizeof result}}, [&] {
    return tirl_ppo_loss(logp.get(), old_logp.get(), advantages.get(), mask.get(), num_tokens,
                         offsets.get(), num_seqs, ref_logp.get(), weights.get(),
                         null_options ? nullptr : &options, grad.get(),
                         null_result ? nullptr : &result, device);
  });
}

// tirl_policy_loss: every loss, its own options, a wrong struct_size now and then.
void fuzz_policy_loss(Decoder& in) {
  const int64_t num_tokens = in.size(64);
  const int64_t num_seqs = in.size(8);
  Buffer<float> logp = in.array<float>(num_tokens), old_logp = in.array<float>(num_tokens),
                advantages = in.array<float>(num_tokens);
  in.fill_floats(logp);
  in.fill_floats(old_logp);
  in.fill_floats(advantages);
  Buffer<uint8_t> mask = in.array<uint8_t>(num_tokens);
  in.fill_bytes(mask, false);
  Buffer<int32_t> offsets = in.one_in(4) ? Buffer<int32_t>{} : in.offsets(num_seqs, num_tokens);
  Buffer<float> ref_logp = in.optional_array<float>(num_tokens),
                weights = in.optional_array<float>(num_tokens);
  in.fill_floats(ref_logp);
  in.fill_floats(weights);
  tirl_policy_loss_options options = tirl_policy_loss_options_default();
  in.enumeration(options.policy_loss, 13);
  tirl_ppo_options& p = options.ppo;
  in.number(p.clip_low);
  in.number(p.clip_high);
  in.number(p.dual_clip);
  in.enumeration(p.aggregation, 5);
  in.number(p.token_normalizer);
  in.number(p.seq_normalizer);
  in.number(p.horizon);
  in.number(p.dp_size);
  in.number(p.kl_coef);
  in.enumeration(p.kl_estimator, 7);
  in.enumeration(p.ratio_level, 2);
  in.number(options.clip_ratio_c);
  in.number(options.tau_pos);
  in.number(options.tau_neg);
  in.number(options.clip_cov_ratio);
  in.number(options.clip_cov_lb);
  in.number(options.clip_cov_ub);
  in.number(options.kl_cov_ratio);
  in.number(options.ppo_kl_coef);
  in.number(options.dro_beta);
  options.seed = in.byte();
  in.enumeration(options.loss_type, 2);
  in.enumeration(options.rollout_is, 3);
  in.number(options.rollout_is_threshold);
  in.number(options.rollout_is_threshold_lower);
  if (in.one_in(8)) options.rollout_is_batch_normalize = in.byte() % 3;
  if (in.one_in(32)) options.struct_size = in.byte();
  const bool null_options = in.one_in(32), null_result = in.one_in(32);
  Buffer<float> grad = in.optional_array<float>(num_tokens);
  tirl_policy_loss_result result;
  std::memset(&result, 0, sizeof result);
  result.struct_size = in.one_in(32) ? in.byte() : sizeof result;
  const uint32_t result_size = result.struct_size;
  const tirl_device device = in.device();
  run("tirl_policy_loss", in, device, {output(grad), {&result.ppo, sizeof result.ppo}}, [&] {
    result.struct_size = result_size;
    return tirl_policy_loss(logp.get(), old_logp.get(), advantages.get(), mask.get(), num_tokens,
                            offsets.get(), num_seqs, ref_logp.get(), weights.get(),
                            null_options ? nullptr : &options, grad.get(),
                            null_result ? nullptr : &result, device);
  });
}

void fuzz_group_advantages(Decoder& in) {
  const int64_t num_rewards = in.size(64);
  Buffer<float> rewards = in.array<float>(num_rewards);
  in.fill_floats(rewards);
  Buffer<int32_t> group_ids = in.optional_array<int32_t>(num_rewards);
  if (group_ids.get() != nullptr) {
    Prng random = in.prng();
    const uint8_t mode = in.byte();
    const uint64_t groups = 1 + mode % 16;
    for (int64_t i = 0; i < group_ids.count; ++i) {
      group_ids.data[i] = mode >= 240 ? static_cast<int32_t>(random.next())
                                      : static_cast<int32_t>(random.below(groups)) - 3;
    }
  }
  int64_t group_size = in.size(16);
  if (in.byte() < 128 && num_rewards > 0) group_size = 1 + in.byte() % 8;
  tirl_group_advantages_options options = tirl_group_advantages_options_default();
  if (in.byte() >= 200) options.scale_by_std = static_cast<int32_t>(in.byte()) - 128;
  in.number(options.epsilon);
  const bool null_options = in.one_in(32);
  Buffer<float> advantages = in.array<float>(num_rewards);
  const tirl_device device = in.device();
  run("tirl_group_advantages", in, device, {output(advantages)}, [&] {
    return tirl_group_advantages(rewards.get(), num_rewards, group_ids.get(), group_size,
                                 null_options ? nullptr : &options, advantages.get(), device);
  });
}

void fuzz_advantages(Decoder& in) {
  const int64_t num_tokens = in.size(64);
  const int64_t num_seqs = in.size(8);
  tirl_advantages_options options = tirl_advantages_options_default();
  in.enumeration(options.estimator, 12);
  // The group and key counts decide array sizes: take them small, sometimes wrong.
  if (in.byte() >= 192) options.num_reward_keys = static_cast<int64_t>(in.byte() % 4);
  if (in.byte() >= 160) options.group_size = in.size(8);
  const int64_t keys = options.num_reward_keys >= 1 && options.num_reward_keys <= 4 ? options.num_reward_keys : 1;
  Buffer<uint8_t> mask = in.array<uint8_t>(num_tokens);
  in.fill_bytes(mask, false);
  Buffer<int32_t> offsets = in.one_in(16) ? Buffer<int32_t>{} : in.offsets(num_seqs, num_tokens);
  // A hostile num_seqs times keys must not overflow here (a negative count is a short array).
  const int64_t reward_count = num_seqs >= 0 && num_seqs <= kInt64Max / keys ? num_seqs * keys : -1;
  Buffer<float> rewards = in.optional_array<float>(reward_count),
                token_rewards = in.optional_array<float>(num_tokens),
                values = in.optional_array<float>(num_tokens),
                baselines = in.optional_array<float>(num_seqs),
                old_logp = in.optional_array<float>(num_tokens),
                sum_pi_squared = in.optional_array<float>(num_tokens),
                is_weights = in.optional_array<float>(num_tokens),
                reward_weights = in.optional_array<float>(keys);
  for (Buffer<float>* b : {&rewards, &token_rewards, &values, &baselines, &old_logp, &sum_pi_squared,
                           &is_weights, &reward_weights}) {
    in.fill_floats(*b);
  }
  Buffer<int32_t> group_ids = in.optional_array<int32_t>(num_seqs);
  if (group_ids.get() != nullptr) {
    Prng random = in.prng();
    const uint8_t mode = in.byte();
    for (int64_t i = 0; i < group_ids.count; ++i) {
      group_ids.data[i] = mode >= 240 ? static_cast<int32_t>(random.next())
                                      : static_cast<int32_t>(random.below(1 + mode % 8)) - 2;
    }
  }
  if (in.byte() >= 200) options.norm_adv_by_std = static_cast<int32_t>(in.byte()) - 128;
  if (in.byte() >= 200) options.handle_zero_tail = static_cast<int32_t>(in.byte()) - 128;
  in.number(options.epsilon);
  in.number(options.gamma);
  in.number(options.lam);
  in.number(options.f_norm);
  tirl_advantages_inputs inputs;
  std::memset(&inputs, 0, sizeof inputs);
  inputs.rewards = rewards.get();
  inputs.token_rewards = token_rewards.get();
  inputs.mask = mask.get();
  inputs.seq_offsets = offsets.get();
  inputs.group_ids = group_ids.get();
  inputs.values = values.get();
  inputs.reward_baselines = baselines.get();
  inputs.old_logp = old_logp.get();
  inputs.sum_pi_squared = sum_pi_squared.get();
  inputs.rollout_is_weights = is_weights.get();
  inputs.reward_weights = reward_weights.get();
  const bool null_inputs = in.one_in(32), null_options = in.one_in(32);
  Buffer<float> advantages = in.array<float>(num_tokens);
  Buffer<float> returns = in.optional_array<float>(num_tokens);
  const tirl_device device = in.device();
  run("tirl_advantages", in, device, {output(advantages), output(returns)}, [&] {
    return tirl_advantages(null_inputs ? nullptr : &inputs, num_tokens, num_seqs,
                           null_options ? nullptr : &options, advantages.get(), returns.get(), device);
  });
}

void fuzz_dpo_loss(Decoder& in) {
  const int64_t num_pairs = in.size(64);
  Buffer<float> inputs[4] = {in.array<float>(num_pairs), in.array<float>(num_pairs),
                             in.array<float>(num_pairs), in.array<float>(num_pairs)};
  for (Buffer<float>& input : inputs) in.fill_floats(input);
  tirl_dpo_options options = tirl_dpo_options_default();
  in.number(options.beta);
  in.number(options.label_smoothing);
  in.enumeration(options.variant, 4);
  const bool null_options = in.one_in(32), null_result = in.one_in(32);
  Buffer<float> outputs[4] = {
      in.optional_array<float>(num_pairs), in.optional_array<float>(num_pairs),
      in.optional_array<float>(num_pairs), in.optional_array<float>(num_pairs)};
  tirl_dpo_result result;
  const tirl_device device = in.device();
  run("tirl_dpo_loss", in, device,
      {output(outputs[0]), output(outputs[1]), output(outputs[2]), output(outputs[3]),
       {&result, sizeof result}},
      [&] {
        return tirl_dpo_loss(inputs[0].get(), inputs[1].get(), inputs[2].get(), inputs[3].get(),
                             num_pairs, null_options ? nullptr : &options, outputs[0].get(),
                             outputs[1].get(), outputs[2].get(), outputs[3].get(),
                             null_result ? nullptr : &result, device);
      });
}

void fuzz_feedback_mask(Decoder& in) {
  const int64_t num_tokens = in.size(64);
  const int64_t num_seqs = in.size(8);
  Buffer<uint8_t> roles = in.array<uint8_t>(num_tokens);
  in.fill_bytes(roles, true);
  Buffer<int32_t> offsets = in.offsets(num_seqs, num_tokens);
  Buffer<uint8_t> keep = in.optional_array<uint8_t>(num_seqs);
  in.fill_bytes(keep, false);
  Buffer<uint8_t> mask = in.array<uint8_t>(num_tokens);
  Buffer<int32_t> action_tokens = in.optional_array<int32_t>(num_seqs);
  const tirl_device device = in.device();
  run("tirl_feedback_mask", in, device, {output(mask), output(action_tokens)}, [&] {
    return tirl_feedback_mask(roles.get(), num_tokens, offsets.get(), num_seqs, keep.get(),
                              mask.get(), action_tokens.get(), device);
  });
}

void fuzz_sequence_logprobs(Decoder& in, bool backward) {
  const int64_t num_tokens = in.size(64);
  const int64_t num_seqs = in.size(8);
  Buffer<uint8_t> mask = in.array<uint8_t>(num_tokens);
  in.fill_bytes(mask, false);
  Buffer<int32_t> offsets = in.offsets(num_seqs, num_tokens);
  const int32_t average = in.byte() < 200 ? in.byte() & 1 : static_cast<int32_t>(in.byte()) - 128;
  const tirl_device device = in.device();
  if (!backward) {
    Buffer<float> logp = in.array<float>(num_tokens);
    in.fill_floats(logp);
    Buffer<float> out = in.array<float>(num_seqs);
    run("tirl_sequence_logprobs", in, device, {output(out)}, [&] {
      return tirl_sequence_logprobs(logp.get(), mask.get(), num_tokens, offsets.get(), num_seqs,
                                    average, out.get(), device);
    });
    return;
  }
  Buffer<float> grad_seq = in.array<float>(num_seqs);
  in.fill_floats(grad_seq);
  Buffer<float> grad_logp = in.array<float>(num_tokens);
  run("tirl_sequence_logprobs_backward", in, device, {output(grad_logp)}, [&] {
    return tirl_sequence_logprobs_backward(grad_seq.get(), mask.get(), num_tokens, offsets.get(),
                                           num_seqs, average, grad_logp.get(), device);
  });
}

void fuzz_rollout_correction(Decoder& in) {
  const int64_t num_tokens = in.size(64);
  const int64_t num_seqs = in.size(8);
  Buffer<float> logp = in.array<float>(num_tokens), rollout_logp = in.array<float>(num_tokens);
  in.fill_floats(logp);
  in.fill_floats(rollout_logp);
  Buffer<uint8_t> mask = in.array<uint8_t>(num_tokens);
  in.fill_bytes(mask, false);
  Buffer<int32_t> offsets = in.offsets(num_seqs, num_tokens);
  tirl_rollout_correction_options options = tirl_rollout_correction_options_default();
  in.enumeration(options.rollout_is, 3);
  in.number(options.rollout_is_threshold);
  in.number(options.rollout_is_threshold_lower);
  if (in.byte() >= 200) options.rollout_is_batch_normalize = static_cast<int32_t>(in.byte()) - 128;
  else options.rollout_is_batch_normalize = in.byte() & 1;
  // Mostly a few valid options with plausible bounds, sometimes any bits and any numbers.
  const uint8_t rs_mode = in.byte();
  if (rs_mode < 200) {
    options.rollout_rs = (static_cast<uint32_t>(in.byte()) << 8 | in.byte()) & 0x7ffu;
  } else {
    options.rollout_rs = static_cast<uint32_t>(in.byte()) << 24 | static_cast<uint32_t>(in.byte()) << 4;
  }
  for (int option = 0; option < TIRL_ROLLOUT_RS_COUNT; ++option) {
    options.rollout_rs_threshold[option] = 1 + in.byte() % 8 * 0.25;
    in.number(options.rollout_rs_threshold[option]);
    in.number(options.rollout_rs_threshold_lower[option]);
  }
  const bool null_options = in.one_in(32), null_result = in.one_in(32);
  Buffer<float> weights = in.array<float>(num_tokens);
  Buffer<uint8_t> mask_out = in.array<uint8_t>(num_tokens);
  const bool in_place = in.one_in(8);  // mask_out may be the mask itself
  tirl_rollout_correction_result result;
  const tirl_device device = in.device();
  // In place, each run starts from the original mask (the rerun compares the mask too).
  const std::vector<uint8_t> original(mask.get(), mask.get() + (mask.get() ? mask.count : 0));
  run("tirl_rollout_correction", in, device,
      {output(weights), output(in_place ? mask : mask_out), {&result, sizeof result}}, [&] {
    if (in_place && !original.empty()) std::memcpy(mask.get(), original.data(), original.size());
    return tirl_rollout_correction(logp.get(), rollout_logp.get(), mask.get(), num_tokens,
                                   offsets.get(), num_seqs, null_options ? nullptr : &options,
                                   weights.get(), in_place ? mask.get() : mask_out.get(),
                                   null_result ? nullptr : &result, device);
  });
}

// Sizes whose product (and byte count) fits, or not: the library must refuse the latter.
int64_t logits_count(int64_t num_tokens, int64_t vocab_size) {
  int64_t count;
  if (num_tokens < 0 || vocab_size < 0 || __builtin_mul_overflow(num_tokens, vocab_size, &count) ||
      count > kInt64Max / 4) {
    return -1;
  }
  return count;
}

void fuzz_token_logprobs(Decoder& in, bool backward) {
  const int64_t num_tokens = in.size(16);
  int64_t vocab_size = in.size(64);
  // Rows of several blocks (2,048 logits), and past the 256 blocks of the one-exp backward.
  if (in.one_in(8)) vocab_size = in.in_range(2049, 600000);
  const int64_t count = logits_count(num_tokens, vocab_size);
  int32_t dtype_value = in.byte() & 1;
  if (in.one_in(32)) dtype_value = static_cast<int32_t>(in.byte()) - 64;
  tirl_dtype dtype;
  set_enum(dtype, dtype_value);
  const bool bf16 = dtype_value == TIRL_DTYPE_BF16;
  double temperature = 1.0;
  in.number(temperature);
  Buffer<int32_t> labels = in.array<int32_t>(num_tokens);
  in.fill_labels(labels, vocab_size);
  const tirl_device device = in.device();
  // logits (f32 or bf16) and grad_logits (f32): separate blocks, the same block (in
  // place, allowed for f32 only) or overlapping parts of one block (to be refused).
  const uint8_t layout = backward ? in.byte() % 4 : 0;
  Buffer<float> logits_f32;
  Buffer<uint16_t> logits_bf16;
  Buffer<float> grad_logits;
  Buffer<char> shared_block;
  const void* logits = nullptr;
  float* grad_out = nullptr;
  if (layout >= 2 && count > 0 && count <= kMaxElements) {
    // Both views inside one block: the gradient starts `shift` floats into the logits (or
    // the logits `shift` floats into the gradient), 0 meaning in place.
    const int64_t shift = layout == 2 ? 0 : 1 + static_cast<int64_t>(in.byte()) % count;
    shared_block = allocate<char>((count + shift) * 4);
    const bool logits_first = in.byte() & 1;
    char* logits_at = shared_block.get() + (logits_first ? 0 : shift * 4);
    char* grad_at = shared_block.get() + (logits_first ? shift * 4 : 0);
    Prng random = in.prng();
    for (int64_t i = 0; i < count; ++i) {
      if (bf16) {
        const uint16_t bits = static_cast<uint16_t>(random.next());
        std::memcpy(logits_at + 2 * i, &bits, 2);
      } else {
        const float value = static_cast<float>(8 * random.unit() - 4);
        std::memcpy(logits_at + 4 * i, &value, 4);
      }
    }
    logits = logits_at;
    grad_out = reinterpret_cast<float*>(grad_at);
  } else {
    if (bf16) {
      logits_bf16 = in.array<uint16_t>(count);
      in.fill_bf16(logits_bf16);
      logits = logits_bf16.get();
    } else {
      logits_f32 = in.array<float>(count);
      in.fill_floats(logits_f32);
      logits = logits_f32.get();
    }
    grad_logits = in.array<float>(count);
    grad_out = grad_logits.get();
  }
  if (!backward) {
    Buffer<float> logp = in.array<float>(num_tokens);
    Buffer<float> entropy = in.optional_array<float>(num_tokens);
    run("tirl_token_logprobs", in, device, {output(logp), output(entropy)}, [&] {
      return tirl_token_logprobs(logits, dtype, num_tokens, vocab_size, labels.get(), temperature,
                                 logp.get(), entropy.get(), device);
    });
    return;
  }
  Buffer<float> grad_logp = in.array<float>(num_tokens);
  in.fill_floats(grad_logp);
  Buffer<float> grad_entropy = in.optional_array<float>(num_tokens);
  in.fill_floats(grad_entropy);
  // In place, a rerun reads the first run's gradients as logits: its outputs differ.
  std::vector<Output> outputs;
  if (shared_block.get() == nullptr) outputs.push_back(output(grad_logits));
  const tirl_status status = run("tirl_token_logprobs_backward", in, device, outputs, [&] {
    return tirl_token_logprobs_backward(logits, dtype, num_tokens, vocab_size, labels.get(),
                                        temperature, grad_logp.get(), grad_entropy.get(),
                                        grad_out, device);
  });
  // The ABI allows the f32 logits buffer itself, or no overlap at all.
  const char* logits_begin = static_cast<const char*>(logits);
  const char* grad_begin = reinterpret_cast<const char*>(grad_out);
  const bool overlap = shared_block.get() != nullptr && logits_begin < grad_begin + count * 4 &&
                       grad_begin < logits_begin + count * (bf16 ? 2 : 4);
  const bool partial_overlap = overlap && !(logits_begin == grad_begin && !bf16);
  if (partial_overlap && status == TIRL_OK) {
    contract_broken("partially overlapping logits and grad_logits accepted",
                    "tirl_token_logprobs_backward");
  }
}

void fuzz_library(Decoder& in) {
  const int32_t threads = in.threads();
  const tirl_status status = checked("tirl_set_num_threads", tirl_set_num_threads(threads));
  if ((status == TIRL_OK) != (threads >= 1 && threads <= 1024)) {
    contract_broken("thread count accepted or refused wrongly", "tirl_set_num_threads");
  }
  if (tirl_num_threads() < 1) contract_broken("fewer than one thread", "tirl_num_threads");
  for (const char* text :
       {tirl_version(), tirl_simd_level(), tirl_build_info(), tirl_cuda_status()}) {
    if (text == nullptr) contract_broken("a null string", "a library query");
  }
  if (std::strcmp(tirl_version(), TIRL_VERSION_STRING) != 0) {
    contract_broken("version mismatch", "tirl_version");
  }
}

// The device-memory helpers, without CUDA: each refuses (never touches the pointers).
void fuzz_cuda_helpers(Decoder& in) {
  const tirl_device device = in.device();
  const size_t bytes = in.byte() < 128 ? in.byte() : static_cast<size_t>(in.size(64));
  char host[256];
  void* pointer = in.byte() & 1 ? host : nullptr;
  switch (in.byte() % 5) {
    case 0: {
      void** out = in.one_in(4) ? nullptr : &pointer;
      checked("tirl_cuda_malloc", tirl_cuda_malloc(device, bytes, out));
      break;
    }
    case 1: checked("tirl_cuda_free", tirl_cuda_free(device, nullptr)); break;
    case 2:
      checked("tirl_cuda_memcpy_h2d", tirl_cuda_memcpy_h2d(device, pointer, host, bytes));
      break;
    case 3:
      checked("tirl_cuda_memcpy_d2h", tirl_cuda_memcpy_d2h(device, host, pointer, bytes));
      break;
    default: checked("tirl_cuda_synchronize", tirl_cuda_synchronize(device)); break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Device pointers are host memory here: CUDA devices are fuzzed only where there is no
  // CUDA (every call must then refuse them), never against a real driver.
  static const bool cuda_fuzzable = tirl_cuda_available() == 0;
  Decoder in(data, size);
  in.set_cuda_fuzzable(cuda_fuzzable);
  tirl_set_num_threads(1 + in.byte() % 4);
  for (int calls = 0; calls < 4 && !in.empty(); ++calls) {
    switch (in.byte() % 13) {
      case 0: fuzz_ppo_loss(in); break;
      case 1: fuzz_group_advantages(in); break;
      case 2: fuzz_dpo_loss(in); break;
      case 3: fuzz_feedback_mask(in); break;
      case 4: fuzz_sequence_logprobs(in, false); break;
      case 5: fuzz_sequence_logprobs(in, true); break;
      case 6: fuzz_token_logprobs(in, false); break;
      case 7: fuzz_token_logprobs(in, true); break;
      case 8: fuzz_library(in); break;
      case 9: if (cuda_fuzzable) fuzz_cuda_helpers(in); break;
      case 10: fuzz_rollout_correction(in); break;
      case 11: fuzz_policy_loss(in); break;
      case 12: fuzz_advantages(in); break;
      default: break;
    }
  }
  return 0;
}
