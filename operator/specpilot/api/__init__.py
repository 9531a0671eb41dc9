"""The SpeculativeDeployment API: pydantic models, CRD and docs generation (pure)."""
