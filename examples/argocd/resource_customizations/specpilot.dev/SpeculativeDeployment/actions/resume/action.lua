-- Give automation back: drop the pause annotation and hand the operator a new reevaluate token, which also clears a
-- halt after a failed rollout or an exhausted actuation budget (the token's change is what the operator compares
-- with status.lastHandledReevaluate).
-- Argo CD's Lua VM has no global os; its safe os module (time and date only) is loaded with require.
local os = require("os")
if obj.metadata == nil then obj.metadata = {} end
if obj.metadata.annotations == nil then obj.metadata.annotations = {} end
obj.metadata.annotations["specpilot.dev/pause"] = nil
obj.metadata.annotations["specpilot.dev/reevaluate"] = os.date("!%Y-%m-%dT%XZ")
return obj
