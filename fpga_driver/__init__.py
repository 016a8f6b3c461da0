"""Host side of the hardware JPEG decoder, and its emulator."""
