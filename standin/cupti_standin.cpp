// cupti_standin.cpp - CPU stand-in for CUPTI's callback API (libcupti.so.13).
//
// Implements the subscriber part of CUPTI: one subscriber at a time, with
// per-(domain, cbid) enable flags.  The flags and the subscriber itself live
// in the stand-in libcuda.so.1, which fires the callbacks from its driver
// functions; this library only manages ownership and forwards enable calls.
// The activity API is not emulated (cuptiActivityFlushAll and cuptiFinalize
// succeed, other activity calls return CUPTI_ERROR_NOT_SUPPORTED).
//
// Environment: VRAMTRACE_STANDIN_CUPTI_BUSY=NAME pretends another tool named
// NAME already holds the subscriber, so every subscribe attempt fails with
// CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED.

#include <cupti.h>

#include "standin_internal.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

struct CUpti_Subscriber_st {
  CUpti_CallbackFunc callback;
  void* userdata;
  std::string name;
};

namespace {

std::mutex g_mu;
CUpti_Subscriber_st* g_subscriber = nullptr;

// Name of whoever holds the subscriber slot, or nullptr if it is free.
const char* holderName() {
  if (const char* busy = std::getenv("VRAMTRACE_STANDIN_CUPTI_BUSY"))
    if (*busy) return busy;
  if (g_subscriber) return g_subscriber->name.c_str();
  return nullptr;
}

bool validDomain(CUpti_CallbackDomain d) {
  return d > CUPTI_CB_DOMAIN_INVALID && d < CUPTI_CB_DOMAIN_SIZE;
}

CUptiResult subscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                      void* userdata, CUpti_SubscriberParams* params) {
  if (!subscriber) return CUPTI_ERROR_INVALID_PARAMETER;
  std::lock_guard<std::mutex> lock(g_mu);
  if (const char* holder = holderName()) {
    if (params && params->oldSubscriberName && params->oldSubscriberSize > 0)
      std::snprintf(params->oldSubscriberName, params->oldSubscriberSize, "%s", holder);
    *subscriber = nullptr;
    return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  }
  auto* s = new CUpti_Subscriber_st{callback, userdata, ""};
  if (params && params->subscriberName) s->name = params->subscriberName;
  g_subscriber = s;
  vramtrace_standin_set_subscriber(callback, userdata);
  *subscriber = s;
  return CUPTI_SUCCESS;
}

bool isCurrent(CUpti_SubscriberHandle s) { return s && s == g_subscriber; }

}  // namespace

extern "C" {

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                    void* userdata) {
  return subscribe(subscriber, callback, userdata, nullptr);
}

CUptiResult CUPTIAPI cuptiSubscribe_v2(CUpti_SubscriberHandle* subscriber,
                                       CUpti_CallbackFunc callback, void* userdata,
                                       CUpti_SubscriberParams* pParams) {
  return subscribe(subscriber, callback, userdata, pParams);
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!isCurrent(subscriber)) return CUPTI_ERROR_INVALID_PARAMETER;
  vramtrace_standin_set_subscriber(nullptr, nullptr);
  g_subscriber = nullptr;
  delete subscriber;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                         CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!isCurrent(subscriber) || !validDomain(domain)) return CUPTI_ERROR_INVALID_PARAMETER;
  if (vramtrace_standin_is_enabled(domain, (int)cbid) < 0) return CUPTI_ERROR_INVALID_PARAMETER;
  vramtrace_standin_enable(enable ? 1 : 0, domain, (int)cbid);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                       CUpti_CallbackDomain domain) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!isCurrent(subscriber) || !validDomain(domain)) return CUPTI_ERROR_INVALID_PARAMETER;
  vramtrace_standin_enable(enable ? 1 : 0, domain, -1);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableAllDomains(uint32_t enable, CUpti_SubscriberHandle subscriber) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!isCurrent(subscriber)) return CUPTI_ERROR_INVALID_PARAMETER;
  vramtrace_standin_enable(enable ? 1 : 0, -1, -1);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetCallbackState(uint32_t* enable, CUpti_SubscriberHandle subscriber,
                                           CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!enable || !isCurrent(subscriber) || !validDomain(domain))
    return CUPTI_ERROR_INVALID_PARAMETER;
  int state = vramtrace_standin_is_enabled(domain, (int)cbid);
  if (state < 0) return CUPTI_ERROR_INVALID_PARAMETER;
  *enable = (uint32_t)state;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char** str) {
  if (!str) return CUPTI_ERROR_INVALID_PARAMETER;
  switch (result) {
    case CUPTI_SUCCESS: *str = "CUPTI_SUCCESS"; break;
    case CUPTI_ERROR_INVALID_PARAMETER: *str = "CUPTI_ERROR_INVALID_PARAMETER"; break;
    case CUPTI_ERROR_NOT_INITIALIZED: *str = "CUPTI_ERROR_NOT_INITIALIZED"; break;
    case CUPTI_ERROR_NOT_SUPPORTED: *str = "CUPTI_ERROR_NOT_SUPPORTED"; break;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
      *str = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED";
      break;
    case CUPTI_ERROR_UNKNOWN: *str = "CUPTI_ERROR_UNKNOWN"; break;
    default: *str = "CUPTI_ERROR_UNKNOWN"; return CUPTI_ERROR_INVALID_PARAMETER;
  }
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetErrorMessage(CUptiResult result, const char** str) {
  return cuptiGetResultString(result, str);
}

CUptiResult CUPTIAPI cuptiGetVersion(uint32_t* version) {
  if (!version) return CUPTI_ERROR_INVALID_PARAMETER;
  *version = CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t) { return CUPTI_SUCCESS; }
CUptiResult CUPTIAPI cuptiFinalize(void) { return CUPTI_SUCCESS; }

// Activity API: not emulated.
CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind) { return CUPTI_ERROR_NOT_SUPPORTED; }
CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind) { return CUPTI_ERROR_NOT_SUPPORTED; }
CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc,
                                                    CUpti_BuffersCallbackCompleteFunc) {
  return CUPTI_ERROR_NOT_SUPPORTED;
}
CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t*, size_t, CUpti_Activity**) {
  return CUPTI_ERROR_NOT_SUPPORTED;
}

}  // extern "C"
