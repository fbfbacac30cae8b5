"""What people do with a calibration: validate it, recalibrate after a crash, plan poses, audit
the arm to ISO 9283, predict and compensate points. Every workflow takes any calibration."""
