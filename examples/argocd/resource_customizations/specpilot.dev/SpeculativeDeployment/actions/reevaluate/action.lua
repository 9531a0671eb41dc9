-- Evaluate now instead of at the next interval: a new token value in specpilot.dev/reevaluate (one-shot, Flux's
-- requestedAt pattern). The time is only a unique value; the operator compares it with status.lastHandledReevaluate.
-- Argo CD's Lua VM has no global os; its safe os module (time and date only) is loaded with require.
local os = require("os")
if obj.metadata == nil then obj.metadata = {} end
if obj.metadata.annotations == nil then obj.metadata.annotations = {} end
obj.metadata.annotations["specpilot.dev/reevaluate"] = os.date("!%Y-%m-%dT%XZ")
return obj
