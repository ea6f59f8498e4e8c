"""The software switch's P4Runtime server (gRPC, on finsy's generated P4Runtime modules)."""
