//! Keeps the images a parser finds within the caller's count and size limits.

use super::ParseOptions;
use crate::rag::document::ExtractedImage;

pub(super) struct ImageCollector<'a> {
    options: &'a ParseOptions,
    images: Vec<ExtractedImage>,
}

/// Where an image sits in the document.
#[derive(Debug, Clone, Default)]
pub(super) struct ImagePlace {
    pub page: Option<u32>,
    pub caption: Option<String>,
    pub section_title: Option<String>,
}

impl<'a> ImageCollector<'a> {
    pub(super) fn new(options: &'a ParseOptions) -> Self {
        Self {
            options,
            images: Vec::new(),
        }
    }

    /// False once images are not wanted or the count limit is reached, so a parser can stop
    /// reading image data early.
    pub(super) fn wants_more(&self) -> bool {
        self.options.save_images && self.images.len() < self.options.max_image_count
    }

    /// Whether an image of this many bytes would be kept.
    pub(super) fn fits(&self, size: usize) -> bool {
        size <= self.options.max_image_bytes
    }

    /// Keeps the image if it is wanted and within the limits; otherwise drops it silently, since a
    /// missing image never makes the text less usable.
    pub(super) fn add(&mut self, bytes: Vec<u8>, mime: &str, place: ImagePlace) {
        if !self.wants_more() || !self.fits(bytes.len()) || bytes.is_empty() {
            return;
        }
        let index = u32::try_from(self.images.len()).unwrap_or(u32::MAX);
        self.images.push(ExtractedImage {
            bytes,
            mime: mime.to_owned(),
            index,
            page: place.page,
            caption: place.caption.filter(|caption| !caption.trim().is_empty()),
            section_title: place.section_title,
        });
    }

    pub(super) fn into_images(self) -> Vec<ExtractedImage> {
        self.images
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_respected() {
        let options = ParseOptions {
            save_images: true,
            max_image_count: 2,
            max_image_bytes: 3,
        };
        let mut images = ImageCollector::new(&options);
        images.add(vec![1, 2, 3, 4], "image/png", ImagePlace::default());
        images.add(vec![1], "image/png", ImagePlace::default());
        images.add(vec![2], "image/jpeg", ImagePlace::default());
        assert!(!images.wants_more());
        images.add(vec![3], "image/png", ImagePlace::default());
        let got: Vec<_> = images.into_images().into_iter().map(|i| (i.index, i.bytes)).collect();
        assert_eq!(got, [(0, vec![1]), (1, vec![2])]);
    }

    #[test]
    fn nothing_is_kept_unless_asked() {
        let options = ParseOptions::default();
        let mut images = ImageCollector::new(&options);
        images.add(vec![1], "image/png", ImagePlace::default());
        assert!(images.into_images().is_empty());
    }
}
