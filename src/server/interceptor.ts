// A grpc-js server interceptor that has nothing to add to a call hands on the
// call it was given instead of wrapping it: each wrapping layer
// (ServerInterceptingCall) is several objects and closures per call, which
// add up on the lifecycle path. grpc-js chains interceptors by passing each
// one's result to the next and only uses the call interface, but its type
// asks for the class.

import type * as grpc from "@grpc/grpc-js";

export function passThrough(
  call: grpc.ServerInterceptingCallInterface,
): grpc.ServerInterceptingCall {
  return call as grpc.ServerInterceptingCall;
}
