//! The CAR binary frame codec (reference "CAR binary frame protocol").
//!
//! Binary WebSocket frames carry audio beside the JSON-RPC text channel. Each starts with
//! a 26-byte header, multi-byte fields little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | type: `0x01` inbound PCM, `0x02` TTS audio, `0x03` TTS final, `0x04` TTS error |
//! | 1 | 16 | session/stream UUID, raw bytes |
//! | 17 | 8 | `seq`, u64, monotonic within the stream |
//! | 25 | 1 | format (type `0x02` only): `0x00` PCM s16le, `0x01` MP3, `0x02` WAV; zero otherwise |
//! | 26 | N | payload |
//!
//! The JSON-RPC `session_id` / `stream_id` naming a stream is the 32-char lower-case hex
//! of the UUID bytes ([`stream_id_hex`]). A final marker (`0x03`) has an empty payload; an
//! error (`0x04`) carries a UTF-8 message as its whole payload.

/// Header length in bytes.
pub const HEADER_LEN: usize = 26;

/// The frame type byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameType {
    InboundPcm = 0x01,
    TtsAudio = 0x02,
    TtsFinal = 0x03,
    TtsError = 0x04,
}

/// The audio format byte of a [`FrameType::TtsAudio`] frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AudioFormat {
    PcmS16Le = 0x00,
    Mp3 = 0x01,
    Wav = 0x02,
}

/// A parsed frame borrowing its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    pub frame_type: FrameType,
    pub stream: [u8; 16],
    pub seq: u64,
    /// `Some` exactly for [`FrameType::TtsAudio`].
    pub format: Option<AudioFormat>,
    pub payload: &'a [u8],
}

/// Why a binary frame was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("binary frame is {0} bytes, shorter than the 26-byte header")]
    TooShort(usize),
    #[error("unknown binary frame type 0x{0:02x}")]
    UnknownType(u8),
    #[error("unknown audio format 0x{0:02x}")]
    UnknownFormat(u8),
    #[error("a final-marker frame must have an empty payload, got {0} bytes")]
    FinalWithPayload(usize),
    #[error("an error frame's payload must be UTF-8")]
    ErrorNotUtf8,
}

/// Parses one binary frame.
pub fn parse_frame(bytes: &[u8]) -> Result<Frame<'_>, FrameError> {
    if bytes.len() < HEADER_LEN {
        return Err(FrameError::TooShort(bytes.len()));
    }
    let frame_type = match bytes[0] {
        0x01 => FrameType::InboundPcm,
        0x02 => FrameType::TtsAudio,
        0x03 => FrameType::TtsFinal,
        0x04 => FrameType::TtsError,
        other => return Err(FrameError::UnknownType(other)),
    };
    let mut stream = [0u8; 16];
    stream.copy_from_slice(&bytes[1..17]);
    let seq = u64::from_le_bytes(bytes[17..25].try_into().expect("8 bytes"));
    let payload = &bytes[HEADER_LEN..];
    let format = match frame_type {
        FrameType::TtsAudio => Some(match bytes[25] {
            0x00 => AudioFormat::PcmS16Le,
            0x01 => AudioFormat::Mp3,
            0x02 => AudioFormat::Wav,
            other => return Err(FrameError::UnknownFormat(other)),
        }),
        _ => None,
    };
    match frame_type {
        FrameType::TtsFinal if !payload.is_empty() => {
            return Err(FrameError::FinalWithPayload(payload.len()))
        }
        FrameType::TtsError if std::str::from_utf8(payload).is_err() => {
            return Err(FrameError::ErrorNotUtf8)
        }
        _ => {}
    }
    Ok(Frame {
        frame_type,
        stream,
        seq,
        format,
        payload,
    })
}

/// Builds one binary frame; the format byte is written only for TTS audio.
pub fn build_frame(frame: &Frame<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + frame.payload.len());
    out.push(frame.frame_type as u8);
    out.extend_from_slice(&frame.stream);
    out.extend_from_slice(&frame.seq.to_le_bytes());
    out.push(match (frame.frame_type, frame.format) {
        (FrameType::TtsAudio, Some(f)) => f as u8,
        _ => 0,
    });
    out.extend_from_slice(frame.payload);
    out
}

/// The 32-char lower-case hex form of a stream UUID used in JSON-RPC params.
pub fn stream_id_hex(stream: &[u8; 16]) -> String {
    hex::encode(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const UUID: [u8; 16] = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee,
        0xff,
    ];

    #[test]
    fn golden_vector_tts_audio() {
        let frame = Frame {
            frame_type: FrameType::TtsAudio,
            stream: UUID,
            seq: 0x0102_0304_0506_0708,
            format: Some(AudioFormat::Mp3),
            payload: b"ab",
        };
        let bytes = build_frame(&frame);
        let mut expected = vec![0x02];
        expected.extend_from_slice(&UUID);
        expected.extend_from_slice(&[0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01]);
        expected.push(0x01);
        expected.extend_from_slice(b"ab");
        assert_eq!(bytes, expected);
        assert_eq!(parse_frame(&bytes).unwrap(), frame);
        assert_eq!(stream_id_hex(&UUID), "00112233445566778899aabbccddeeff");
    }

    #[test]
    fn every_type_round_trips_and_bad_frames_are_refused() {
        for (t, format, payload) in [
            (FrameType::InboundPcm, None, &b"\x01\x00\xff\x7f"[..]),
            (FrameType::TtsAudio, Some(AudioFormat::Wav), &b"RIFF"[..]),
            (FrameType::TtsFinal, None, &b""[..]),
            (FrameType::TtsError, None, "voice failed: ü".as_bytes()),
        ] {
            let f = Frame {
                frame_type: t,
                stream: UUID,
                seq: 7,
                format,
                payload,
            };
            assert_eq!(parse_frame(&build_frame(&f)).unwrap(), f);
        }
        assert_eq!(parse_frame(&[1; 25]), Err(FrameError::TooShort(25)));
        let mut bad = build_frame(&Frame {
            frame_type: FrameType::InboundPcm,
            stream: UUID,
            seq: 0,
            format: None,
            payload: &[],
        });
        bad[0] = 9;
        assert_eq!(parse_frame(&bad), Err(FrameError::UnknownType(9)));
        bad[0] = 2;
        bad[25] = 7;
        assert_eq!(parse_frame(&bad), Err(FrameError::UnknownFormat(7)));
        let mut fin = build_frame(&Frame {
            frame_type: FrameType::TtsFinal,
            stream: UUID,
            seq: 0,
            format: None,
            payload: &[],
        });
        fin.push(1);
        assert_eq!(parse_frame(&fin), Err(FrameError::FinalWithPayload(1)));
        let mut err = build_frame(&Frame {
            frame_type: FrameType::TtsError,
            stream: UUID,
            seq: 0,
            format: None,
            payload: &[],
        });
        err.push(0xff);
        assert_eq!(parse_frame(&err), Err(FrameError::ErrorNotUtf8));
    }

    proptest! {
        #[test]
        fn pcm_round_trips(stream in any::<[u8; 16]>(), seq in any::<u64>(), payload in proptest::collection::vec(any::<u8>(), 0..512)) {
            let f = Frame { frame_type: FrameType::InboundPcm, stream, seq, format: None, payload: &payload };
            let bytes = build_frame(&f);
            prop_assert_eq!(bytes.len(), HEADER_LEN + payload.len());
            prop_assert_eq!(parse_frame(&bytes).unwrap(), f);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_frame(&bytes);
        }
    }
}
