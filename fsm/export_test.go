package fsm

// DecodeEnqueueAliasing exposes the aliasing decoder to the tests, which
// hold it to proto.Unmarshal.
var DecodeEnqueueAliasing = decodeEnqueueAliasing
