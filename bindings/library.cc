// Library queries: version, threads, SIMD path, build flags.
#include "common.h"
#include "ops.h"

namespace tirl::binding {

void register_library(Napi::Env env, Napi::Object exports) {
  exports.Set("info", Napi::Function::New(env, [](const Napi::CallbackInfo& info) -> Napi::Value {
                Napi::Env env = info.Env();
                Napi::Object r = Napi::Object::New(env);
                r.Set("version", tirl_version());
                r.Set("threads", tirl_num_threads());
                r.Set("simd", tirl_simd_level());
                r.Set("build", tirl_build_info());
                r.Set("napiVersion", NAPI_VERSION);
                r.Set("cuda", cuda_status_object(env));
                return r;
              }));
  exports.Set("setThreads", Napi::Function::New(env, [](const Napi::CallbackInfo& info) -> Napi::Value {
                Napi::Env env = info.Env();
                Napi::Value n = info.Length() > 0 ? info[0] : env.Undefined();
                if (!n.IsNumber()) {
                  throw Napi::TypeError::New(
                      env, "setThreads: Expected an integer in [1, 1024] for threads but received " +
                               describe(n));
                }
                double value = n.As<Napi::Number>().DoubleValue();
                if (!(value >= 1 && value <= 1024) || value != static_cast<int32_t>(value)) {
                  throw Napi::RangeError::New(
                      env, "setThreads: Expected an integer in [1, 1024] for threads but received " +
                               describe(n));
                }
                tirl_set_num_threads(static_cast<int32_t>(value));
                return env.Undefined();
              }));
  // The floor of every op's async form, for the bench: a Promise resolved (with undefined)
  // by an empty work item on libuv's thread pool, queued and settled exactly as an op's
  // kernel is (queue_async_work), with no arguments, copies or kernel.
  exports.Set("poolRoundTrip", Napi::Function::New(env, [](const Napi::CallbackInfo& info) -> Napi::Value {
                struct RoundTrip {
                  napi_async_work work = nullptr;
                  napi_deferred deferred = nullptr;
                };
                auto trip = std::make_unique<RoundTrip>();
                napi_value promise = queue_async_work(
                    info.Env(), [](napi_env, void*) {},
                    [](napi_env env, napi_status, void* data) {
                      std::unique_ptr<RoundTrip> done(static_cast<RoundTrip*>(data));
                      napi_value undefined;
                      napi_get_undefined(env, &undefined);
                      napi_resolve_deferred(env, done->deferred, undefined);
                      napi_delete_async_work(env, done->work);
                    },
                    trip.get(), &trip->work, &trip->deferred);
                trip.release();  // the complete callback deletes it
                return Napi::Value(info.Env(), promise);
              }));
}

}  // namespace tirl::binding
