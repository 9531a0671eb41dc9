-- Argo CD health check for specpilot.dev/SpeculativeDeployment.
-- Plain table logic only: Argo CD's default Lua VM has no string or math library.
local hs = {}

local function condition(status, ctype)
  if status == nil or status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == ctype then
      return c
    end
  end
  return nil
end

local function message_of(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end

local status = obj.status
if status == nil or status.observedGeneration == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for specpilot to reconcile this SpeculativeDeployment"
  return hs
end

if obj.metadata ~= nil and obj.metadata.generation ~= nil and status.observedGeneration < obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for specpilot to observe the latest spec"
  return hs
end

local degraded = condition(status, "Degraded")
if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = message_of(degraded, "Degraded")
  return hs
end

local memory = condition(status, "MemoryFit")
if memory ~= nil and memory.status == "False" then
  hs.status = "Degraded"
  hs.message = message_of(memory, "The memory plan does not fit the GPUs")
  return hs
end

local ready = condition(status, "Ready")
if ready ~= nil and ready.status == "False" and ready.reason == "InvalidSpec" then
  hs.status = "Degraded"
  hs.message = message_of(ready, "Invalid spec")
  return hs
end

local progressing = condition(status, "Progressing")
if progressing ~= nil and progressing.status == "True" then
  hs.status = "Progressing"
  hs.message = message_of(progressing, "Rolling out a new vLLM configuration")
  return hs
end

local paused = condition(status, "Paused")
if paused ~= nil and paused.status == "True" then
  hs.status = "Suspended"
  hs.message = message_of(paused, "Automation paused")
  return hs
end

local throttled = condition(status, "Throttled")
if throttled ~= nil and throttled.status == "True" then
  hs.status = "Suspended"
  hs.message = message_of(throttled, "Actuation budget exhausted")
  return hs
end

if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  local metrics = condition(status, "MetricsAvailable")
  if metrics ~= nil and metrics.status == "False" then
    hs.message = "Serving; autotune holds the current configuration because metrics are unavailable"
  else
    hs.message = message_of(ready, "Serving")
    -- The framework rules advise, they do not break serving: still Healthy, but the advice is what admins see.
    for _, ctype in ipairs({"QuantizationPenalty", "MixedWorkload", "ShortOutputs", "AcceptanceMethod"}) do
      local advice = condition(status, ctype)
      if advice ~= nil and advice.status == "True" then
        hs.message = "Serving; specpilot advises (" .. ctype .. "): " .. message_of(advice, advice.reason)
        break
      end
    end
  end
  return hs
end

hs.status = "Progressing"
hs.message = message_of(ready, "Waiting for vLLM pods to become ready")
return hs
