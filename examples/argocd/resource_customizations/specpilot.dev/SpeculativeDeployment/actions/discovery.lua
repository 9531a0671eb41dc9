-- Argo CD resource actions for specpilot.dev/SpeculativeDeployment: pause, resume, reevaluate.
-- They only set annotations on the CR (the break-glass and one-shot overrides); the
-- operator reads them and never writes them. Plain table logic: Argo CD's default Lua VM has no string library.
local actions = {}
local annotations = {}
if obj.metadata ~= nil and obj.metadata.annotations ~= nil then
  annotations = obj.metadata.annotations
end
local paused = annotations["specpilot.dev/pause"] == "true"

local halted = false
if obj.status ~= nil and obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    if (c.type == "Paused" or c.type == "Throttled") and c.status == "True" then
      halted = true
    end
  end
end

actions["pause"] = {["disabled"] = paused, ["iconClass"] = "fa fa-fw fa-pause-circle"}
actions["resume"] = {["disabled"] = not (paused or halted), ["iconClass"] = "fa fa-fw fa-play-circle"}
actions["reevaluate"] = {["disabled"] = paused, ["iconClass"] = "fa fa-fw fa-redo"}
return actions
