//! A multipart upload's checksum as S3 keeps it: the algorithm and type CreateMultipartUpload
//! asks for, and the object's checksum completion makes of its parts' — COMPOSITE (the
//! algorithm over the parts' checksums, `-<parts>` after it) or FULL_OBJECT (the parts' CRCs
//! combined into the CRC of the whole object, no byte read again).

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use s3s::dto::{ChecksumAlgorithm, ChecksumType};

use crate::s3::checksum::Algorithm;
use crate::store::{PartChecksums, StoreError, StoreResult, StoredChecksum, UploadChecksum};

/// The checksum an upload is to keep, from CreateMultipartUpload's `x-amz-checksum-algorithm`
/// and `x-amz-checksum-type`, refused as S3 refuses them: a type needs an algorithm, CRC64NVME
/// is FULL_OBJECT only, SHA-1 and SHA-256 COMPOSITE only. Without a type, CRC64NVME is
/// FULL_OBJECT and the others COMPOSITE. `None`: the upload keeps none.
pub fn requested(
    algorithm: Option<&ChecksumAlgorithm>,
    kind: Option<&ChecksumType>,
) -> s3s::S3Result<Option<UploadChecksum>> {
    let full_object = match kind.map(|kind| kind.as_str().to_ascii_uppercase()) {
        None => None,
        Some(kind) if kind == ChecksumType::FULL_OBJECT => Some(true),
        Some(kind) if kind == ChecksumType::COMPOSITE => Some(false),
        Some(_) => {
            return Err(s3s::s3_error!(
                InvalidRequest,
                "Value for x-amz-checksum-type header is invalid."
            ));
        }
    };
    let Some(algorithm) = algorithm else {
        return match full_object {
            None => Ok(None),
            Some(_) => Err(s3s::s3_error!(
                InvalidRequest,
                "The x-amz-checksum-type header can only be used with the x-amz-checksum-algorithm header."
            )),
        };
    };
    let algorithm = Algorithm::from_name(algorithm.as_str())
        .ok_or_else(|| s3s::s3_error!(InvalidRequest, "Value for x-amz-checksum-algorithm header is invalid."))?;
    let full_object = full_object.unwrap_or(algorithm == Algorithm::Crc64Nvme);
    let crc = crc_of(algorithm).is_some();
    if (full_object && !crc) || (!full_object && algorithm == Algorithm::Crc64Nvme) {
        let kind = if full_object { "FULL_OBJECT" } else { "COMPOSITE" };
        return Err(s3s::S3Error::with_message(
            s3s::S3ErrorCode::InvalidRequest,
            format!(
                "The {kind} checksum type cannot be used with the {} checksum algorithm.",
                algorithm.name().to_ascii_lowercase()
            ),
        ));
    }
    Ok(Some(UploadChecksum {
        algorithm: algorithm.name().to_owned(),
        full_object,
    }))
}

/// The `x-amz-checksum-type` S3 names a checksum with.
pub fn checksum_type(full_object: bool) -> ChecksumType {
    ChecksumType::from_static(if full_object {
        ChecksumType::FULL_OBJECT
    } else {
        ChecksumType::COMPOSITE
    })
}

/// What a CompleteMultipartUpload request declares of the object's checksum: an
/// `x-amz-checksum-*` value and an `x-amz-checksum-type`, both checked against what the
/// completion makes.
#[derive(Debug, Default)]
pub struct Completion {
    pub declared: Option<(Algorithm, String)>,
    pub declared_type: Option<ChecksumType>,
}

impl PartChecksums for Completion {
    fn complete(&self, upload: &UploadChecksum, parts: &[(&str, u64)]) -> StoreResult<StoredChecksum> {
        let algorithm = Algorithm::from_name(&upload.algorithm)
            .ok_or_else(|| StoreError::Corrupt(format!("upload checksum algorithm {:?}", upload.algorithm)))?;
        if let Some(kind) = &self.declared_type
            && !kind
                .as_str()
                .eq_ignore_ascii_case(checksum_type(upload.full_object).as_str())
        {
            return Err(StoreError::InvalidRequest(format!(
                "The upload was created using the {} checksum mode. The complete request must use the same checksum mode.",
                checksum_type(upload.full_object).as_str()
            )));
        }
        let mut decoded = Vec::with_capacity(parts.len());
        for (value, size) in parts {
            let raw = BASE64
                .decode(value)
                .map_err(|_| StoreError::Corrupt(format!("part checksum {value:?}")))?;
            decoded.push((raw, *size));
        }
        let value = match upload.full_object {
            true => BASE64.encode(full_object(algorithm, &decoded)?),
            false => format!("{}-{}", BASE64.encode(composite(algorithm, &decoded)), parts.len()),
        };
        // A COMPOSITE value may be declared with its `-N` or without, as S3 takes it.
        let bare = value
            .rsplit_once('-')
            .filter(|_| !upload.full_object)
            .map(|(bare, _)| bare);
        if let Some((declared, declared_value)) = &self.declared
            && (*declared != algorithm || (declared_value.trim() != value && Some(declared_value.trim()) != bare))
        {
            return Err(StoreError::BadDigest(format!(
                "The {} you specified did not match the calculated checksum.",
                declared.name().to_ascii_lowercase()
            )));
        }
        Ok(StoredChecksum {
            algorithm: algorithm.name().to_owned(),
            value,
            composite: !upload.full_object,
        })
    }

    fn none_kept(&self) -> StoreResult<()> {
        match (&self.declared, &self.declared_type) {
            (None, None) => Ok(()),
            // S3 would check it against the checksum it keeps for every object; pgvs3 keeps
            // none for this upload, so it cannot, and says so rather than accept it unchecked.
            _ => Err(StoreError::NotImplemented(
                "a checksum on CompleteMultipartUpload of an upload created without x-amz-checksum-algorithm \
                 (pgvs3 keeps no checksum for its object, so it cannot check one)"
                    .into(),
            )),
        }
    }
}

/// COMPOSITE: the algorithm over the parts' raw checksums, concatenated in part order.
fn composite(algorithm: Algorithm, parts: &[(Vec<u8>, u64)]) -> Vec<u8> {
    let joined: Vec<u8> = parts.iter().flat_map(|(raw, _)| raw.iter().copied()).collect();
    algorithm.digest(&joined)
}

/// FULL_OBJECT: the parts' CRCs combined, as if the CRC had run over the whole object.
fn full_object(algorithm: Algorithm, parts: &[(Vec<u8>, u64)]) -> StoreResult<Vec<u8>> {
    let crc = crc_of(algorithm).ok_or_else(|| StoreError::Corrupt(format!("{} is not a CRC", algorithm.name())))?;
    let mut whole: Option<u64> = None;
    for (raw, size) in parts {
        let value = crc
            .value(raw)
            .ok_or_else(|| StoreError::Corrupt(format!("a {}-byte {} checksum", raw.len(), algorithm.name())))?;
        whole = Some(match whole {
            None => value,
            Some(before) => crc.combine(before, value, *size),
        });
    }
    // An upload completes with one part at least; the CRC of nothing is zero.
    Ok(crc.bytes(whole.unwrap_or(0)))
}

/// A reflected CRC whose initial value and final XOR are all ones (CRC-32, CRC-32C,
/// CRC-64/NVME): such CRCs combine as `crc(A ‖ B) = crc(A) · x^(8·|B|) mod P ⊕ crc(B)`, the
/// conditioning of the two cancelling out (zlib's `crc32_combine`, for any width).
#[derive(Debug, Clone, Copy)]
struct Crc {
    /// The polynomial, bit-reflected, without its x^width term.
    poly: u64,
    width: u32,
}

fn crc_of(algorithm: Algorithm) -> Option<Crc> {
    match algorithm {
        Algorithm::Crc32 => Some(Crc {
            poly: 0xEDB8_8320,
            width: 32,
        }),
        Algorithm::Crc32c => Some(Crc {
            poly: 0x82F6_3B78,
            width: 32,
        }),
        Algorithm::Crc64Nvme => Some(Crc {
            poly: 0x9A6C_9329_AC4B_C9B5,
            width: 64,
        }),
        Algorithm::Sha1 | Algorithm::Sha256 => None,
    }
}

impl Crc {
    /// x^0 in the reflected representation (the top bit).
    fn one(self) -> u64 {
        1 << (self.width - 1)
    }

    /// `a · b mod P`, both reflected.
    fn multiply(self, a: u64, mut b: u64) -> u64 {
        let mut bit = self.one();
        let mut product = 0;
        while bit != 0 {
            if a & bit != 0 {
                product ^= b;
            }
            bit >>= 1;
            b = if b & 1 != 0 { (b >> 1) ^ self.poly } else { b >> 1 };
        }
        product
    }

    /// `crc` followed by `len` bytes' worth of zero bits, without conditioning: `crc · x^(8·len)`.
    fn shift(self, crc: u64, len: u64) -> u64 {
        // x^8, then squared for each bit of `len`.
        let mut power = self.one() >> 8;
        let mut factor = self.one();
        let mut n = len;
        while n != 0 {
            if n & 1 != 0 {
                factor = self.multiply(power, factor);
            }
            power = self.multiply(power, power);
            n >>= 1;
        }
        self.multiply(factor, crc)
    }

    fn combine(self, first: u64, second: u64, second_len: u64) -> u64 {
        self.shift(first, second_len) ^ second
    }

    /// A checksum's value from its big-endian bytes, as S3 encodes a CRC.
    fn value(self, raw: &[u8]) -> Option<u64> {
        (raw.len() as u32 * 8 == self.width).then(|| raw.iter().fold(0u64, |acc, byte| (acc << 8) | *byte as u64))
    }

    fn bytes(self, value: u64) -> Vec<u8> {
        value.to_be_bytes()[(8 - self.width as usize / 8)..].to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CRCS: [Algorithm; 3] = [Algorithm::Crc32, Algorithm::Crc32c, Algorithm::Crc64Nvme];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// A FULL_OBJECT checksum made of parts' CRCs is the CRC of all their bytes, for any
        /// split (empty parts included).
        #[test]
        fn combined_crcs_are_the_crc_of_the_whole_object(
            parts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..3000), 1..5),
        ) {
            let whole: Vec<u8> = parts.concat();
            for algorithm in CRCS {
                let raw: Vec<(Vec<u8>, u64)> =
                    parts.iter().map(|part| (algorithm.digest(part), part.len() as u64)).collect();
                prop_assert_eq!(full_object(algorithm, &raw).unwrap(), algorithm.digest(&whole), "{}", algorithm.name());
            }
        }
    }

    /// A long second part (the shift's squarings past many bits of its length).
    #[test]
    fn crcs_combine_across_a_multi_mebibyte_part() {
        let first: Vec<u8> = (0..777u32).map(|i| (i * 7) as u8).collect();
        let second: Vec<u8> = (0..(5 << 20) + 3u32).map(|i| (i ^ (i >> 9)) as u8).collect();
        for algorithm in CRCS {
            let raw = [
                (algorithm.digest(&first), first.len() as u64),
                (algorithm.digest(&second), second.len() as u64),
            ];
            assert_eq!(
                full_object(algorithm, &raw).unwrap(),
                algorithm.digest(&[first.clone(), second.clone()].concat())
            );
        }
    }

    /// COMPOSITE as S3 computed it for three SHA-256 parts (values captured from S3, as
    /// quoted in floci-io/floci#3083).
    #[test]
    fn composite_sha256_is_the_digest_of_the_part_digests() {
        let parts = [
            "lcKa6Boe7a167tUCN5C4OaFygGSYD8MBnBARTrdL+1w=",
            "gHjhbUT4oo2tSCtSZJdlKi+jeNXJT+VImqdPXsXvkOc=",
            "4l9PQ3zOPZ0oGFvknFX+J4zZwE4WMzO+l3r8XrbWOeM=",
        ];
        let upload = UploadChecksum {
            algorithm: "SHA256".into(),
            full_object: false,
        };
        let listed: Vec<(&str, u64)> = parts.iter().map(|part| (*part, 5 << 20)).collect();
        let made = Completion::default().complete(&upload, &listed).unwrap();
        assert_eq!(made.value, "rVWtNbadtsaKXJAcgWPWjifHzJaXde/iV4jaJAOdivc=-3");
        assert!(made.composite);
    }

    #[test]
    fn upload_checksum_types_are_refused_as_s3_refuses_them() {
        let algorithm = |name: &str| Some(ChecksumAlgorithm::from(name.to_owned()));
        let kind = |name: &str| Some(ChecksumType::from(name.to_owned()));
        let asked = |a: Option<ChecksumAlgorithm>, k: Option<ChecksumType>| requested(a.as_ref(), k.as_ref());
        let kept = |a, k| asked(a, k).unwrap().map(|kept| (kept.algorithm, kept.full_object));
        assert_eq!(kept(None, None), None);
        assert_eq!(kept(algorithm("CRC64NVME"), None), Some(("CRC64NVME".into(), true)));
        assert_eq!(kept(algorithm("CRC32"), None), Some(("CRC32".into(), false)));
        assert_eq!(
            kept(algorithm("crc32c"), kind("FULL_OBJECT")),
            Some(("CRC32C".into(), true))
        );
        assert_eq!(kept(algorithm("SHA1"), kind("COMPOSITE")), Some(("SHA1".into(), false)));
        let refused = |a, k| asked(a, k).unwrap_err().message().unwrap_or_default().to_owned();
        assert_eq!(
            refused(algorithm("SHA256"), kind("FULL_OBJECT")),
            "The FULL_OBJECT checksum type cannot be used with the sha256 checksum algorithm."
        );
        assert_eq!(
            refused(algorithm("CRC64NVME"), kind("COMPOSITE")),
            "The COMPOSITE checksum type cannot be used with the crc64nvme checksum algorithm."
        );
        assert!(refused(None, kind("COMPOSITE")).starts_with("The x-amz-checksum-type header can only be used"));
        assert_eq!(
            refused(algorithm("CRC32"), kind("PARTIAL")),
            "Value for x-amz-checksum-type header is invalid."
        );
        assert_eq!(
            refused(algorithm("MD5"), None),
            "Value for x-amz-checksum-algorithm header is invalid."
        );
    }
}
