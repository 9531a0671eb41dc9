-- Break glass: stop autotune from changing the vLLM configuration (specpilot.dev/pause=true). Serving goes on.
if obj.metadata == nil then obj.metadata = {} end
if obj.metadata.annotations == nil then obj.metadata.annotations = {} end
obj.metadata.annotations["specpilot.dev/pause"] = "true"
return obj
